"""A run that raises is retried with backoff, the same fire each time; after
``park_after_stalls`` failed runs in a row its lane parks and is reported once. The next fire
time is still honoured while it is parked (the new fire supersedes the failed one), and once a
deployment with a fixed function runs, the schedule completes its pending fire and fires on
schedule again."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from schedules_support import CONFIG, HOUR, MINUTE, START, Runs, app_with_echo, clock, fire_ms

from threadline import Application, ManualClock, ScheduleContext
from threadline.scheduling import LaneState
from threadline.testing import SimulatedObject

TWO_HOURS = 2 * HOUR
FIRST = (START // TWO_HOURS + 1) * TWO_HOURS


def build(runs: Runs, manual: ManualClock, *, fixed: bool) -> Application:
    app = app_with_echo()

    @app.every(timedelta(hours=2), id="report")
    async def report(ctx: ScheduleContext) -> None:
        runs.calls.append(("report", fire_ms(ctx), manual.now_ms(), None))
        await ctx.submit("reports", fire_ms(ctx))  # admitted once per fire, however many runs
        if not fixed:
            raise RuntimeError("the report service is down")
        runs.fires.append(("report", fire_ms(ctx)))

    return app


async def _scenario() -> None:
    runs = Runs()
    manual = clock()
    obj = SimulatedObject(build(runs, manual, fixed=False), clock=manual,
                          check_alarm_invariant=True)
    async with obj:
        await obj.run_alarms(until=FIRST + 30 * MINUTE)
        retries = [fire for _, fire, _, _ in runs.calls]
        assert retries == [FIRST] * CONFIG.park_after_stalls  # the same fire, retried
        queued = obj.space.scheduler.due_queue.get("report")
        assert queued is not None and queued.state is LaneState.PARKED
        [view] = obj.space.api.maintenance.schedules()
        assert view["state"] == "parked"
        assert view["pending_fire"] == FIRST and view["failures"] == CONFIG.park_after_stalls
        assert view["last_error"]["type"] == "RuntimeError"
        assert view["last_error"]["message"] == "the report service is down"
        assert view["next_fire"] == FIRST + TWO_HOURS

        # Parked: retried hourly, and the next fire still runs at its time.
        await obj.run_alarms(until=FIRST + TWO_HOURS + 10 * MINUTE)
        late = runs.calls[CONFIG.park_after_stalls:]
        assert [fire for _, fire, _, _ in late] == [FIRST, FIRST + TWO_HOURS]
        assert late[1][2] == FIRST + TWO_HOURS  # on time, not an hour late

        await obj.redeploy(build(runs, manual, fixed=True))
        await obj.run_alarms(until=FIRST + 2 * TWO_HOURS + MINUTE)
        # The fixed function completes the pending fire at the hourly retry, then fires on time.
        assert runs.of("report") == [FIRST + TWO_HOURS, FIRST + 2 * TWO_HOURS]
        [view] = obj.space.api.maintenance.schedules()
        assert view["state"] == "scheduled" and view["failures"] == 0
        assert view["last_fire"] == FIRST + 2 * TWO_HOURS
        assert view["last_error"]["fire"] == FIRST + TWO_HOURS  # kept for operators
        queued = obj.space.scheduler.due_queue.get("report")
        assert queued is not None and queued.state is LaneState.DUE and queued.stalls == 0
        assert [sub.input for sub in obj.submissions("reports")] == [
            FIRST, FIRST + TWO_HOURS, FIRST + 2 * TWO_HOURS]


def test_a_failing_run_parks_is_reported_once_and_fires_again_after_a_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="threadline.maintenance"):
        asyncio.run(_scenario())
    parked = [r.getMessage() for r in caplog.records if "is parked" in r.getMessage()]
    assert len(parked) == 1 and "'report'" in parked[0]
