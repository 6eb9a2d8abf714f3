"""Producers wake host lanes. ``turn.wake_lane`` commits with the Attempt's facts (fenced by its
claim, with a journal entry): an Attempt lost before it enrolls nothing, and a replay that meets
the entry does not enroll again. The Worker's ``Space.wake_lane`` has the cursor semantics of
``gate.schedule``: without a cursor, or with one no newer than the last, a lane backing off is
not moved earlier; a strictly newer cursor is progress. Both refuse a lane that is not declared
and a naive datetime, and every wake arms the alarm in its own transaction."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime, timedelta
from typing import Any

import pytest
from host_lanes_support import CONFIG, at, clock, lane

from threadline import Application, LaneContext, SchedulingError, Turn
from threadline.clock import ManualClock
from threadline.scheduling import LaneState
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.signals import LeaseLost
from threadline.threads.turn_base import STEP_FINISHED, STEP_STARTED

HOUR = 3_600_000


def _waker_app(time: ManualClock, waves: list[int]) -> Application:
    app = Application(CONFIG)

    @app.agent("waker")
    async def waker(turn: Turn) -> Any:
        await turn.step("before", lambda: 1)
        await turn.wake_lane("sync", at(time.now_ms() + HOUR))
        await turn.step("after", lambda: 2)
        return "done"

    @app.lane("sync")
    async def sync(ctx: LaneContext) -> None:
        waves.append(1)

    return app


async def _wake_across_a_crash(location: str) -> tuple[list[int | None], int, int]:
    """Crash at ``location`` in the first Attempt; return the lane's revision at the crash, its
    revision at the end, and how many waves ran."""
    time = clock()
    waves: list[int] = []
    obj = SimulatedObject(_waker_app(time, waves), clock=time, check_alarm_invariant=True)
    at_crash: list[int | None] = []
    restart = obj.evict

    async def evict() -> None:
        # A connection of its own: the lost incarnation's storage is already closed.
        conn = sqlite3.connect(obj.path)
        try:
            row = conn.execute("SELECT revision FROM tl_lanes WHERE id = 'sync'").fetchone()
        finally:
            conn.close()
        at_crash.append(None if row is None else int(row[0]))
        await restart()

    obj.evict = evict  # type: ignore[method-assign]
    try:
        await obj.start()
        await obj.run_alarms()
        sub = obj.admit("t", "waker", None)
        occurrence = 2 if location == STEP_STARTED else 1  # "after" starting / "before" done
        crash = obj.crash_at(location, occurrence)
        await obj.run_alarms(until=time.now_ms() + 2 * HOUR)
        assert crash.fired
        assert obj.submission(sub.id).outcome is Outcome.COMPLETED
        row = lane(obj, "sync")
        assert row is not None and row.state is LaneState.IDLE
        return at_crash, row.revision, len(waves)
    finally:
        obj.close()


def test_an_attempt_lost_before_it_wakes_a_lane_enrolls_nothing_and_its_retry_enrolls_once(
) -> None:
    at_crash, revision, waves = asyncio.run(_wake_across_a_crash(STEP_FINISHED))
    assert at_crash == [None]  # nothing enrolled by the lost Attempt
    assert revision == 1 and waves == 1


def test_a_replay_after_the_wake_committed_does_not_enroll_again() -> None:
    at_crash, revision, waves = asyncio.run(_wake_across_a_crash(STEP_STARTED))
    assert at_crash == [1]  # committed with the Attempt's facts, before the crash
    assert revision == 1 and waves == 1  # the replay met its journal entry


async def _wake_refused(target: str, when: Any) -> tuple[Outcome | None, str]:
    app = Application(CONFIG)

    @app.agent("waker")
    async def waker(turn: Turn) -> Any:
        await turn.wake_lane(target, when)
        return "done"

    @app.lane("sync")
    async def sync(ctx: LaneContext) -> None:
        return None

    async with SimulatedObject(app, clock=clock()) as obj:
        sub = obj.admit("t", "waker", None)
        await obj.run_alarms()
        done = obj.submission(sub.id)
        assert lane(obj, "sync") is None and lane(obj, target) is None
        assert done.attempts == 1  # refused for good, not retried
        return done.outcome, str(done.error)


@pytest.mark.parametrize(("target", "when", "message"), [
    ("nope", None, "no host lane 'nope'"),
    ("threadline:recovery-events", None, "no host lane"),
    ("sync", datetime(2030, 1, 1), "naive datetime"),
    ("sync", 1_900_000_000_000, "aware datetime"),
])
def test_an_agent_waking_an_undeclared_lane_or_at_a_naive_time_fails_for_good(
    target: str, when: Any, message: str
) -> None:
    outcome, error = asyncio.run(_wake_refused(target, when))
    assert outcome is Outcome.FAILED and message in error


async def _revoked_turn() -> None:
    app = Application(CONFIG)
    turns: list[Turn] = []

    @app.agent("keeper")
    async def keeper(turn: Turn) -> Any:
        turns.append(turn)
        return "done"

    @app.lane("sync")
    async def sync(ctx: LaneContext) -> None:
        return None

    async with SimulatedObject(app, clock=clock()) as obj:
        obj.admit("t", "keeper", None)
        await obj.run_alarms()
        # Code of the agent outliving its Attempt cannot wake anything.
        with pytest.raises(LeaseLost):
            await turns[0].wake_lane("sync")
        assert lane(obj, "sync") is None


def test_code_outliving_its_attempt_cannot_wake_a_lane() -> None:
    asyncio.run(_revoked_turn())


def _failing_app(waves: list[int]) -> Application:
    app = Application(CONFIG)

    @app.lane("sync")
    async def sync(ctx: LaneContext) -> None:
        waves.append(1)
        raise RuntimeError("host is down")

    return app


async def _cursor_semantics() -> None:
    waves: list[int] = []
    async with SimulatedObject(_failing_app(waves), clock=clock(),
                               check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        obj.wake_lane("sync", cursor=5)
        await obj.run_alarms(until=obj.alarm_at)
        failed = lane(obj, "sync")
        assert failed is not None and failed.stalls == 1 and failed.cursor == 5
        backoff = failed.due_at
        assert backoff is not None and backoff > obj.clock.now_ms()
        # No cursor, an equal one, an older one: a repeated notice, not earlier than the floor.
        for cursor in (None, 5, 3):
            obj.wake_lane("sync", cursor=cursor)
            row = lane(obj, "sync")
            assert row is not None and row.due_at == backoff and row.stalls == 1
        assert obj.alarm_at == backoff
        # A newer cursor is progress: due now, its retry budget refilled.
        now = obj.clock.now_ms()
        obj.wake_lane("sync", cursor=6)
        row = lane(obj, "sync")
        assert row is not None and row.due_at == now and row.stalls == 0 and row.cursor == 6
        assert obj.alarm_at == now + CONFIG.min_alarm_delay_ms


def test_the_host_wake_has_the_cursor_semantics_of_gate_schedule() -> None:
    asyncio.run(_cursor_semantics())


async def _host_wake_later() -> None:
    waves: list[int] = []
    app = Application(CONFIG)

    @app.lane("sync")
    async def sync(ctx: LaneContext) -> None:
        waves.append(ctx.now.timestamp())  # type: ignore[arg-type]

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        later = obj.clock.now_ms() + HOUR
        obj.wake_lane("sync", at(later))
        assert obj.alarm_at == later  # armed with the enrollment
        await obj.run_alarms(until=later - 1)
        assert waves == []
        await obj.run_alarms()
        assert waves == [later / 1000]


def test_a_host_wake_at_a_later_time_runs_the_lane_then_and_not_before() -> None:
    asyncio.run(_host_wake_later())


@pytest.mark.parametrize(("lane_id", "when", "cursor", "message"), [
    ("nope", None, None, "no host lane 'nope'"),
    ("sync", datetime(2030, 1, 1), None, "naive datetime"),
    ("sync", None, -1, "cursor"),
    ("sync", None, True, "cursor"),
    ("sync", timedelta(hours=1), None, "aware datetime"),
])
def test_a_host_wake_of_an_undeclared_lane_or_with_a_bad_argument_is_refused(
    lane_id: str, when: Any, cursor: Any, message: str
) -> None:
    async def body() -> None:
        async with SimulatedObject(_failing_app([]), clock=clock()) as obj:
            with pytest.raises(SchedulingError, match=message):
                obj.wake_lane(lane_id, when, cursor=cursor)
            assert lane(obj, lane_id) is None

    asyncio.run(body())
