"""``threadline.testing.alarm_invariant_problem`` holds the delayed lane to its earliest delayed
submission, each schedule's lane to its next fire (and a recorded pending fire) and the native
lane to the last timer of a head that sleeps on timers alone, not merely "not idle": a healthy
lane due later is a broken invariant. A lane charged without progress
(a failed, overrun or lost wave) may wait out its retry floor, except past the next fire of a
schedule whose fire is recorded: nothing postpones that."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from threadline import Application, ManualClock, RuntimeConfig, ScheduleContext, Turn
from threadline.scheduling import DELAYED, NATIVE
from threadline.testing import SimulatedObject, alarm_invariant_problem

START = 1_700_000_000_000
MINUTE = 60_000
FIVE = 5 * MINUTE
FIRST = (START // FIVE + 1) * FIVE
DUE = START + 10 * MINUTE
_LANE = ("UPDATE tl_lanes SET due_at = ?, not_before = ?, stalls = ?,"
         " state = CASE WHEN ? >= 12 THEN 'parked' ELSE 'due' END WHERE id = ?")


def _app() -> Application:
    app = Application(RuntimeConfig(alarm_backoff_base_ms=1_000))

    @app.agent("echo")
    async def echo(turn: Turn) -> object:
        return turn.input

    @app.every(timedelta(minutes=5), id="sync")
    async def sync(ctx: ScheduleContext) -> None:
        return None

    return app


async def _problems() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    async with SimulatedObject(_app(), clock=ManualClock(START)) as obj:
        obj.admit("t", "echo", "later", not_before=DUE)
        storage, now = obj.storage, obj.clock.now_ms()

        def check(name: str) -> None:
            found[name] = alarm_invariant_problem(storage, obj.app, now)

        def lane(lane_id: str, due: int | None, not_before: int = 0, stalls: int = 0) -> None:
            if due is None:
                storage.exec("UPDATE tl_lanes SET due_at = NULL, not_before = 0, stalls = 0,"
                             " state = 'idle' WHERE id = ?", lane_id)
            else:
                storage.exec(_LANE, due, not_before, stalls, stalls, lane_id)

        check("healthy")
        lane(DELAYED, DUE + 1)
        check("delayed lane late")
        lane(DELAYED, DUE + 1, DUE + 1, 1)
        check("delayed lane backing off")
        lane(DELAYED, DUE)
        lane("sync", FIRST + 1)
        check("schedule lane late")
        lane("sync", FIRST + 1, FIRST + 1, 2)
        check("schedule lane backing off")
        lane("sync", None)
        check("schedule lane idle")
        storage.exec("UPDATE tl_schedules SET pending_fire = ?, next_fire = ? WHERE id = 'sync'",
                     FIRST, FIRST + FIVE)
        lane("sync", FIRST + 3_600_000, FIRST + 3_600_000, 12)
        check("parked past the next fire")
        lane("sync", FIRST + FIVE, FIRST + FIVE, 12)
        check("parked until the next fire")
    return found


def test_lanes_are_held_to_the_delayed_submissions_and_the_schedules_they_serve() -> None:
    found = asyncio.run(_problems())
    assert found["healthy"] is None
    assert "delayed submission" in (found["delayed lane late"] or "")
    assert found["delayed lane backing off"] is None
    assert "schedule 'sync' fires next" in (found["schedule lane late"] or "")
    assert found["schedule lane backing off"] is None
    assert "is idle" in (found["schedule lane idle"] or "")
    assert "pending" in (found["parked past the next fire"] or "")
    assert found["parked until the next fire"] is None


def _sleeper() -> Application:
    app = Application(RuntimeConfig(alarm_backoff_base_ms=1_000))

    @app.agent("nap")
    async def nap(turn: Turn) -> object:
        await turn.sleep(600)
        return "rested"

    return app


async def _timer_problems() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    async with SimulatedObject(_sleeper(), clock=ManualClock(START)) as obj:
        made = obj.admit("t", "nap", {}).id
        await obj.run_alarms(until=START + 60_000)
        [timer] = obj.waits(made)
        wake = timer.wake_at
        assert wake is not None
        storage, now = obj.storage, obj.clock.now_ms()

        def check(name: str) -> None:
            found[name] = alarm_invariant_problem(storage, obj.app, now)

        check("asleep")
        storage.exec(_LANE, wake + MINUTE, 0, 0, 0, NATIVE)
        check("native lane late")
        storage.exec(_LANE, wake + MINUTE, wake + MINUTE, 1, 1, NATIVE)
        check("native lane backing off")
        storage.exec("UPDATE tl_lanes SET due_at = NULL, state = 'idle' WHERE id = ?", NATIVE)
        check("native lane idle")
        # Once its timer is applied, the head waits for a person, not for the clock.
        storage.exec("UPDATE tl_waits SET kind = 'approval', wake_at = NULL"
                     " WHERE submission_id = ?", made)
        check("waiting for someone")
    return found


def test_the_native_lane_is_held_to_the_timers_a_suspended_head_sleeps_on() -> None:
    found = asyncio.run(_timer_problems())
    assert found["asleep"] is None
    assert "sleeps on timers until" in (found["native lane late"] or "")
    assert found["native lane backing off"] is None
    assert "is idle" in (found["native lane idle"] or "")
    assert found["waiting for someone"] is None
