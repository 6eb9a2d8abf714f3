"""Recovery before dispatch: a claim of an earlier incarnation is lost at once, a Thread whose
Attempt is in flight in this incarnation is never recovered, whatever its lease says."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pass_support import CONFIG, Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState


def _app(calls: dict[str, int], *, effect: str = "idempotent") -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        async def act() -> int:
            calls["act"] = calls.get("act", 0) + 1
            return calls["act"]

        return await turn.step("act", act, effect=effect)

    return app


def test_pass_recovers_a_claim_of_an_earlier_incarnation_on_the_first_pass_after_restart(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        calls: dict[str, int] = {}
        obj = Obj(raw_storage, clock, lambda: _app(calls))
        await obj.start()
        await obj.run()
        sub = obj.admit("t1", {"n": 1})
        obj.failpoints.evict_at("step:started")
        clock.advance(1_000)
        with pytest.raises(Evicted):
            await obj.fire()
        assert obj.get(sub.id).state is SubmissionState.RUNNING
        lease_end = obj.get(sub.id).lease_expires_at
        await obj.evict()
        reports = await obj.run()
        settled = obj.get(sub.id)
        assert settled.state is SubmissionState.SETTLED and settled.outcome is Outcome.COMPLETED
        assert lease_end is not None and clock.now_ms() < lease_end  # not after the lease
        assert reports[0].recovered == 1 and reports[0].settled == 1

    run(body())


def test_pass_never_recovers_a_thread_whose_attempt_is_in_flight(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        release = asyncio.Event()
        started: dict[str, int] = {}
        app_calls: dict[str, int] = {}

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("slow")
            async def slow(turn: Any) -> Any:
                started[turn.submission_id] = started.get(turn.submission_id, 0) + 1

                async def model_call() -> str:
                    await release.wait()  # a model call longer than the lease
                    return "answer"

                return await turn.step("llm", model_call)

            @app.agent("quick")
            async def quick(turn: Any) -> Any:
                app_calls["quick"] = app_calls.get("quick", 0) + 1
                # The long call of the other Thread outlives its lease meanwhile.
                clock.advance(CONFIG.lease_ms + 1_000)
                return "ok"

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        slow = obj.admit("a", {}, agent="slow")
        quick = obj.admit("b", {}, agent="quick")
        quick2 = obj.admit("b", {}, agent="quick")
        task = asyncio.ensure_future(obj.fire())
        for _ in range(50):
            await asyncio.sleep(0)
            if obj.get(quick2.id).state is SubmissionState.SETTLED:
                break
        # The slow Attempt's lease expired while the pass rescanned for Thread b's next input.
        current = obj.get(slow.id)
        assert current.state is SubmissionState.RUNNING
        assert current.lease_expires_at is not None and current.lease_expires_at < clock.now_ms()
        assert obj.get(quick.id).state is SubmissionState.SETTLED
        # Whoever asks recovery about the Thread meanwhile, its in-flight Attempt is left alone.
        sweep = obj.space.runtime.run_recovery("a")
        assert (sweep.reports, sweep.blocked) == ((), ())
        assert obj.get(slow.id).state is SubmissionState.RUNNING
        release.set()
        report = await task
        assert obj.get(slow.id).outcome is Outcome.COMPLETED
        assert started[slow.id] == 1  # no second, concurrent Attempt
        assert obj.get(slow.id).attempts == 1
        assert report.recovered == 0

    run(body())


def test_pass_treats_an_uncertain_step_lost_in_an_earlier_incarnation_as_unknown(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        calls: dict[str, int] = {}
        obj = Obj(raw_storage, clock, lambda: _app(calls, effect="uncertain"))
        await obj.start()
        await obj.run()
        sub = obj.admit("t1", {"n": 1})
        obj.failpoints.evict_at("step:started")
        with pytest.raises(Evicted):
            await obj.fire()
        await obj.evict()
        await obj.run()
        assert obj.get(sub.id).state is SubmissionState.UNKNOWN
        assert raw_storage.known_alarm() is None  # an operator's decision keeps no alarm

    run(body())
