"""The next fire time after a parked run is still honoured: a schedule whose every run fails
parks after ``park_after_stalls`` failed runs (reported once), yet each later fire runs at its
own time, not at the parking's hourly retry, and its lane stays parked."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from schedules_support import CONFIG, MINUTE, START, Runs, app_with_echo, clock, fire_ms, lane

from threadline import ScheduleContext
from threadline.scheduling import LaneState
from threadline.testing import SimulatedObject

TEN = 10 * MINUTE
FIRST = (START // TEN + 1) * TEN


async def _scenario() -> None:
    runs = Runs()
    app = app_with_echo()

    @app.every(timedelta(minutes=10), id="sync")
    async def sync(ctx: ScheduleContext) -> None:
        runs.calls.append(("sync", fire_ms(ctx), obj.clock.now_ms(), None))
        raise ConnectionError("upstream unreachable")

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        await obj.run_alarms(until=FIRST + TEN - 1)
        assert [fire for _, fire, _, _ in runs.calls] == [FIRST] * CONFIG.park_after_stalls
        parked = lane(obj, "sync")
        assert parked is not None and parked.state is LaneState.PARKED
        assert parked.due_at == FIRST + TEN  # the next fire, not the hourly retry
        del runs.calls[:]
        await obj.run_alarms(until=FIRST + 5 * TEN)
        fires = [FIRST + n * TEN for n in range(1, 6)]
        assert [(fire, started) for _, fire, started, _ in runs.calls] == [
            (fire, fire) for fire in fires]
        still = lane(obj, "sync")
        assert still is not None and still.state is LaneState.PARKED


def test_each_next_fire_runs_on_time_while_the_schedule_is_parked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="threadline.maintenance"):
        asyncio.run(_scenario())
    parked = [r.getMessage() for r in caplog.records if "is parked" in r.getMessage()]
    assert len(parked) == 1
