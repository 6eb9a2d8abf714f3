"""Deadlines on the injected clock: no new Attempt after ``yield_after_ms``; at
``event_deadline_ms`` an Attempt still running is cancelled and lost; work left is re-armed."""

from __future__ import annotations

import asyncio
from typing import Any

from pass_support import Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.maintenance import PassPhase
from threadline.scheduling import AlarmDecision
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, yield_after_ms=10_000,
                       event_deadline_ms=20_000, native_concurrency=1)


def test_pass_admits_no_attempt_after_the_yield_deadline(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        ran: list[str] = []

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                ran.append(turn.thread_id)
                clock.advance(CONFIG.yield_after_ms)  # this Attempt uses the pass's budget
                return "ok"

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        for thread in ("a", "b", "c"):
            obj.admit(thread, {})
        clock.advance(1_000)
        first = await obj.fire()
        assert ran == ["a"] and first.settled == 1
        assert first.alarm is AlarmDecision.REARMED  # work left is re-armed, not lost
        assert first.alarm_at == clock.now_ms() + CONFIG.min_alarm_delay_ms
        await obj.run()
        assert ran == ["a", "b", "c"]

    run(body())


def test_pass_cancels_an_attempt_still_running_at_the_event_deadline(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        hang = {"on": True}
        steps: list[int] = []

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                async def call() -> str:
                    steps.append(turn.attempt)
                    if hang["on"]:
                        await asyncio.Event().wait()  # never answers
                    return "answer"

                return await turn.step("call", call)

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        sub = obj.admit("a", {})
        clock.advance(1_000)
        started = clock.now_ms()
        task = asyncio.ensure_future(obj.fire())
        for _ in range(20):
            await asyncio.sleep(0)
        assert steps == [1] and not task.done()
        clock.set(started + CONFIG.event_deadline_ms)
        report = await asyncio.wait_for(task, timeout=5)
        assert report.phase is PassPhase.ACTIONABLE
        assert report.settled == 0
        # The Attempt was cancelled: its claim stays, lost, and the work is re-armed promptly.
        assert obj.get(sub.id).state is SubmissionState.RUNNING
        assert report.alarm_at == clock.now_ms() + CONFIG.min_alarm_delay_ms
        hang["on"] = False
        reports = await obj.run()
        assert obj.get(sub.id).outcome is Outcome.COMPLETED
        assert reports[0].recovered == 1  # lost at once, long before its lease
        assert steps == [1, 2]

    run(body())
