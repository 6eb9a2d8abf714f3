"""After-native host lanes: each due one gets one wave once every native Attempt of the pass has
joined (also when native work failed, and also when it was woken during that native work),
``after_native_concurrency`` at a time, in an order rotated by the durable
``last_after_native_lane`` cursor, so a lane a deadline left out goes first next time."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from host_lanes_support import CONFIG, clock, lane

from threadline import Application, LaneContext, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.scheduling import LaneState, read_state
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, SubmissionState

NATIVE_MS = 5_000


async def _after_native_joined() -> None:
    time = clock()
    seen: list[tuple[str, int, SubmissionState]] = []
    app = Application(CONFIG)
    holder: dict[str, Any] = {}

    @app.agent("long")
    async def long(turn: Turn) -> str:
        await turn.step("work", lambda: time.sleep_until(time.now_ms() + NATIVE_MS))
        return "done"

    @app.lane("digest", phase="after-native")
    async def digest(ctx: LaneContext) -> None:
        obj, sub_id = holder["obj"], holder["sub"]
        seen.append(("digest", time.now_ms(), obj.submission(sub_id).state))

    async with SimulatedObject(app, clock=time, check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        holder["obj"] = obj
        holder["sub"] = obj.admit("t", "long", None).id
        obj.wake_lane("digest")  # due at the pass's begin, like the native work
        fired = obj.alarm_at
        assert fired is not None
        reports = await obj.run_alarms(until=fired)
        assert [r.phase for r in reports] == [PassPhase.ACTIONABLE]
        # Not with the pass's start: only once the Attempt had joined (and settled).
        assert seen == [("digest", fired + NATIVE_MS, SubmissionState.SETTLED)]
        row = lane(obj, "digest")
        assert row is not None and row.state is LaneState.IDLE
        assert obj.alarm_at is None


def test_an_after_native_lane_runs_once_every_native_attempt_has_joined() -> None:
    asyncio.run(_after_native_joined())


async def _woken_during_native() -> None:
    time = clock()
    seen: list[int] = []
    app = Application(CONFIG)

    @app.agent("waker")
    async def waker(turn: Turn) -> str:
        await turn.wake_lane("digest")
        await turn.step("work", lambda: time.sleep_until(time.now_ms() + NATIVE_MS))
        return "done"

    @app.lane("digest", phase="after-native")
    async def digest(ctx: LaneContext) -> None:
        seen.append(time.now_ms())

    async with SimulatedObject(app, clock=time, check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        sub = obj.admit("t", "waker", None)
        fired = obj.alarm_at
        assert fired is not None
        reports = await obj.run_alarms(until=fired)
        assert len(reports) == 1
        assert obj.submission(sub.id).outcome is Outcome.COMPLETED
        assert seen == [fired + NATIVE_MS]  # in the same pass, after the Attempt joined
        assert obj.alarm_at is None


def test_an_after_native_lane_woken_during_native_work_runs_in_the_same_pass() -> None:
    asyncio.run(_woken_during_native())


async def _native_failed() -> None:
    seen: list[int] = []
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return turn.input

    @app.lane("digest", phase="after-native")
    async def digest(ctx: LaneContext) -> None:
        seen.append(len(obj.reports))

    async with SimulatedObject(app, clock=clock()) as obj:
        await obj.run_alarms()
        obj.admit("t", "echo", 1)
        obj.wake_lane("digest")
        # The pass's checkpoint fails: native work failed, the pass backs off.
        failure = obj.fail_statements("UPDATE tl_maintenance SET nonterminal")
        fired = obj.alarm_at
        assert fired is not None
        reports = await obj.run_alarms(until=fired)
        assert failure.remaining == 0
        assert [r.phase for r in reports] == [PassPhase.FAILED]
        assert seen == [len(obj.reports) - 1]  # the after-native wave ran in the failed pass
        row = lane(obj, "digest")
        assert row is not None and row.state is LaneState.IDLE
        await obj.run_alarms()
        assert len(seen) == 1


def test_after_native_lanes_run_even_when_native_work_failed() -> None:
    asyncio.run(_native_failed())


def _three_lanes(
    time: ManualClock, config: RuntimeConfig, spans: list[tuple[str, int, int]], work_ms: int,
    *, again: bool,
) -> Application:
    app = Application(config)
    for name in ("a", "b", "c"):

        @app.lane(name, phase="after-native", dispatch_timeout=timedelta(seconds=10))
        async def run(ctx: LaneContext, name: str = name) -> datetime | None:
            begun = time.now_ms()
            await time.sleep_until(begun + work_ms)
            spans.append((name, begun, time.now_ms()))
            ctx.progress()
            return ctx.now if again else None  # due again at once, or idle

    return app


async def _two_at_a_time() -> None:
    time = clock()
    spans: list[tuple[str, int, int]] = []
    async with SimulatedObject(_three_lanes(time, CONFIG, spans, 1_000, again=False),
                               clock=time, check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        for name in ("a", "b", "c"):
            obj.wake_lane(name)
        fired = obj.alarm_at
        assert fired is not None
        reports = await obj.run_alarms(until=fired)
        assert len(reports) == 1
        # a and b together; c takes the first slot that frees.
        assert spans == [("a", fired, fired + 1_000), ("b", fired, fired + 1_000),
                         ("c", fired + 1_000, fired + 2_000)]
        assert obj.alarm_at is None


def test_after_native_lanes_run_two_at_a_time_by_default() -> None:
    assert RuntimeConfig().after_native_concurrency == 2
    asyncio.run(_two_at_a_time())


async def _rotation() -> list[list[str]]:
    time = clock()
    spans: list[tuple[str, int, int]] = []
    # Two waves of 6 s fit a 15 s event; a third, started at 6 s with 10 s of allowance, would
    # not: it stays due, uncharged, for the next event.
    config = CONFIG.model_copy(update={"event_deadline_ms": 15_000, "yield_after_ms": 15_000,
                                       "attempt_timeout_ms": 7_000})
    async with SimulatedObject(_three_lanes(time, config, spans, 6_000, again=True),
                               clock=time) as obj:
        await obj.run_alarms()
        for name in ("a", "b", "c"):
            obj.wake_lane(name)
        served: list[list[str]] = []
        cursors: list[str | None] = []
        for _ in range(4):
            fired = obj.alarm_at
            assert fired is not None
            before = len(spans)
            await obj.run_alarms(until=fired)
            served.append([name for name, _, _ in spans[before:]])
            cursors.append(read_state(obj.storage).last_after_native_lane)
        for name in ("a", "b", "c"):
            row = lane(obj, name)
            assert row is not None and row.stalls == 0  # left out is never charged
        assert cursors == [names[-1] for names in served]
        return served


def test_after_native_lanes_are_rotated_fairly_across_events() -> None:
    served = asyncio.run(_rotation())
    assert served == [["a", "b"], ["c", "a"], ["b", "c"], ["a", "b"]]
