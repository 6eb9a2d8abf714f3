"""Deadlines on the injected clock: no new Attempt after ``yield_after_ms``; at
``event_deadline_ms`` an Attempt still running is cancelled and lost; work left is re-armed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
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


# The second Attempt starts late in the pass, so the event deadline comes before its own timeout.
LATE = RuntimeConfig(alarm_backoff_base_ms=1_000, yield_after_ms=10_000,
                     event_deadline_ms=20_000, attempt_timeout_ms=15_000, native_concurrency=1)


def test_at_the_event_deadline_an_agent_gets_the_cancel_grace_then_is_abandoned(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """The pass's cancellation takes the runtime's cancel-with-grace path, as a timeout does:
    an agent that swallows it holds the pass for ``cancel_grace_ms`` at most, is abandoned,
    and whatever it does afterwards writes nothing."""

    async def body() -> None:
        stubborn = {"on": True}
        release = asyncio.Event()
        late: list[str] = []

        def make() -> Application:
            app = Application(LATE)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                if turn.thread_id == "a":
                    clock.advance(9_000)  # the next Attempt starts late in the pass
                    return "first"
                if stubborn["on"]:
                    try:
                        await asyncio.Event().wait()
                    except asyncio.CancelledError:
                        await release.wait()  # ignores the cancellation
                    try:
                        await turn.step("late", lambda: "too late")
                    except BaseException as exc:
                        late.append(type(exc).__name__)
                        raise
                    return "from the abandoned Attempt"
                return "answer"

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        obj.admit("a", {})
        sub = obj.admit("b", {})
        clock.advance(1_000)
        started = clock.now_ms()
        task = asyncio.ensure_future(obj.fire())
        for _ in range(20):
            await asyncio.sleep(0)
        assert obj.space.runtime.active_threads == {"b"}
        clock.set(started + LATE.event_deadline_ms)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done(), "the pass did not give the agent its grace"
        clock.advance(LATE.cancel_grace_ms)
        report = await asyncio.wait_for(task, timeout=5)
        assert report.settled == 1
        assert obj.space.runtime.abandoned == 1
        assert not obj.space.runtime.active_threads
        # The abandoned agent wakes: its Turn was revoked, so its step and its return land
        # nowhere.
        release.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert late and obj.space.runtime.abandoned == 0
        assert obj.get(sub.id).state is SubmissionState.RUNNING
        stubborn["on"] = False
        reports = await obj.run()
        assert reports[0].recovered == 1  # this incarnation no longer runs it: lost at once
        done = obj.get(sub.id)
        assert (done.outcome, done.result) == (Outcome.COMPLETED, "answer")

    run(body())


def test_an_agent_abandoned_while_its_timeout_grace_is_cut_short_is_still_tracked(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """The event deadline may come while a timed-out agent is in its grace: the pass does
    not wait longer, the agent is abandoned (kept referenced until it ends) and writes
    nothing, and the next pass recovers the claim at once."""

    async def body() -> None:
        release = asyncio.Event()
        late: list[str] = []

        def make() -> Application:
            app = Application(CONFIG)  # attempt timeout: half the event deadline

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                if turn.attempt == 1:
                    try:
                        await asyncio.Event().wait()
                    except asyncio.CancelledError:
                        await release.wait()
                    try:
                        await turn.step("late", lambda: "too late")
                    except BaseException as exc:
                        late.append(type(exc).__name__)
                        raise
                return "answer"

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
        # The timeout and the event deadline pass at once.
        clock.set(started + CONFIG.event_deadline_ms)
        report = await asyncio.wait_for(task, timeout=5)
        assert report.settled == 0
        assert obj.space.runtime.abandoned == 1
        release.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert late and obj.space.runtime.abandoned == 0
        reports = await obj.run()
        assert reports[0].recovered == 1
        assert obj.get(sub.id).outcome is Outcome.COMPLETED

    run(body())


def test_an_attempt_cancelled_at_the_event_deadline_is_owed_even_when_seen_running(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    # A rescan while the Attempt ran saw its Thread active; the checkpoint reads it again
    # once the Attempt was cancelled, and finds the lost claim.
    async def body() -> None:
        hang = {"on": True}
        started_steps: list[int] = []

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                async def call() -> str:
                    started_steps.append(turn.attempt)
                    if hang["on"]:
                        await asyncio.Event().wait()  # never answers
                    return "answer"

                return await turn.step("call", call)

            return app

        async def idle(now: int, deadline: int) -> int | None:
            return None

        obj = Obj(raw_storage, clock, make)
        obj.space.lanes.register("probe.lane", idle, dispatch_timeout_ms=1_000)
        await obj.start()
        await obj.run()
        sub = obj.admit("a", {})
        clock.advance(1_000)
        started = clock.now_ms()
        task = asyncio.ensure_future(obj.fire())
        for _ in range(20):
            await asyncio.sleep(0)
        assert started_steps == [1] and not task.done()

        def abandoned() -> None:
            raise ValueError("rolled back")

        # A producer that rolled back: the gate's hint moved (the pass rescans everything and
        # sees the Thread running), the durable generation did not (no overlap to re-arm).
        dirty = obj.generation()[0]
        with pytest.raises(ValueError):
            obj.space.scheduler.gate.mutate(abandoned)
        assert obj.generation()[0] == dirty
        # Any later commit wakes the pass, which then rescans while the Attempt still runs.
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms() + 3_600_000)
        for _ in range(20):
            await asyncio.sleep(0)
        clock.set(started + CONFIG.event_deadline_ms)
        report = await asyncio.wait_for(task, timeout=5)
        assert report.settled == 0
        assert obj.get(sub.id).state is SubmissionState.RUNNING
        assert report.alarm_at == clock.now_ms() + CONFIG.min_alarm_delay_ms
        assert obj.generation()[1] < dirty
        hang["on"] = False
        await obj.run()
        assert obj.get(sub.id).outcome is Outcome.COMPLETED

    run(body())
