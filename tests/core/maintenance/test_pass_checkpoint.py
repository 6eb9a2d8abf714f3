"""Checkpoint: the pass's own settlements do not dirty the generation again (no extra pass);
a producer that overlapped the pass keeps the generation dirty; native work owed now that
made no progress keeps a durable, growing backoff."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from pass_support import CONFIG, Obj, echo_app, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.scheduling import read_state
from threadline.storage import SqliteStorage
from threadline.threads.model import SubmissionState


def test_pass_checkpoint_costs_no_extra_pass_after_its_own_settlements(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        subs = [obj.admit(f"t{n % 3}", {"n": n}) for n in range(6)]
        dirty_before, _ = obj.generation()
        reports = await obj.run()
        assert [r.phase for r in reports] == [PassPhase.ACTIONABLE]  # one pass, not two
        assert all(obj.get(s.id).state is SubmissionState.SETTLED for s in subs)
        dirty, processed = obj.generation()
        assert dirty == dirty_before and processed == dirty
        assert raw_storage.known_alarm() is None
        assert read_state(raw_storage).nonterminal == 0

    run(body())


def test_pass_does_not_acknowledge_a_generation_a_producer_overlapped(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        gate = asyncio.Event()
        holder: dict[str, Obj] = {}

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                if turn.thread_id == "a":
                    # A client admits input while this Attempt runs (its own context).
                    contextvars.Context().run(holder["obj"].admit, "b", {})
                    gate.set()
                return "ok"

            return app

        obj = Obj(raw_storage, clock, make)
        holder["obj"] = obj
        await obj.start()
        await obj.run()
        obj.admit("a", {})
        clock.advance(1_000)
        first = await obj.fire()
        assert gate.is_set() and first.phase is PassPhase.ACTIONABLE
        dirty, processed = obj.generation()
        assert processed < dirty  # the overlapped observation is not certified
        assert raw_storage.known_alarm() == clock.now_ms() + CONFIG.min_alarm_delay_ms
        await obj.run()
        dirty, processed = obj.generation()
        assert processed == dirty and raw_storage.known_alarm() is None

    run(body())


def test_pass_backs_off_native_work_owed_now_that_makes_no_progress(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        sub = obj.admit("t", {})
        runtime = obj.space.runtime
        original = runtime.process_thread_head

        async def stuck(thread_id: str, *, yield_after: int | None = None) -> None:
            return None  # e.g. every claim loses its compare-and-set

        runtime.process_thread_head = stuck  # type: ignore[assignment,method-assign]
        delays = []
        for _ in range(4):
            clock.set(max(clock.now_ms(), raw_storage.known_alarm() or 0))
            await obj.fire()
            retry = read_state(raw_storage).pending_retry
            assert retry is not None
            assert raw_storage.known_alarm() == retry.not_before
            delays.append(retry.not_before - clock.now_ms())
        stalls = read_state(raw_storage).pending_retry
        assert stalls is not None and stalls.stalls == 4
        base = CONFIG.alarm_backoff_base_ms
        for n, delay in enumerate(delays):
            ceiling = min(CONFIG.alarm_backoff_cap_ms, base * 2**n)
            assert ceiling / 2 <= delay <= ceiling
        runtime.process_thread_head = original  # type: ignore[method-assign]
        await obj.run()
        assert obj.get(sub.id).state is SubmissionState.SETTLED
        assert read_state(raw_storage).pending_retry is None

    run(body())


def test_pass_dispatches_input_admitted_while_a_long_attempt_runs(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        release = asyncio.Event()

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                if turn.thread_id == "long":
                    await release.wait()  # a long model call
                return "ok"

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        obj.admit("long", {})
        clock.advance(1_000)
        task = asyncio.ensure_future(obj.fire())
        for _ in range(10):
            await asyncio.sleep(0)
        # A client admits input for another Thread (its own task, so its own context).
        quick = contextvars.Context().run(obj.admit, "quick", {})
        for _ in range(20):
            await asyncio.sleep(0)
        assert obj.get(quick.id).state is SubmissionState.SETTLED  # not behind the long call
        assert not task.done()
        release.set()
        report = await task
        assert report.settled == 2

    run(body())
