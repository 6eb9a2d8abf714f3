"""A schedule's run cancelled from outside (its pass failed in native work while the run was
in flight) still leaves the schedule's lane due by its next fire time: the claim that began the
wave (here one that parked the lane for an hour) never postpones the next fire, and the
alarm invariant holds. The cancelled fire is run again, at the latest at that next fire."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from schedules_support import MINUTE, START, Runs, app_with_echo, clock, fire_ms, lane, row

from threadline import RuntimeConfig, ScheduleContext
from threadline.errors import StorageError
from threadline.scheduling import LaneState
from threadline.testing import SimulatedObject

FIVE = 5 * MINUTE
FIRST = (START // FIVE + 1) * FIVE
# Every claim without progress parks the lane: the claim of the cancelled run is an hour away.
CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=60_000,
                       park_after_stalls=1)


async def _scenario() -> None:
    runs = Runs()
    app = app_with_echo(CONFIG)
    cancelled = 0

    @app.every(timedelta(minutes=5), id="sync", dispatch_timeout=timedelta(seconds=60))
    async def sync(ctx: ScheduleContext) -> None:
        nonlocal cancelled
        runs.calls.append(("sync", fire_ms(ctx), obj.clock.now_ms(), None))
        try:
            await obj.clock.sleep_until(obj.clock.now_ms() + 20_000)
        except asyncio.CancelledError:
            cancelled += 1
            raise

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        await obj.run_alarms(until=FIRST - 400)
        # Native work is due at the fire too: the pass at FIRST runs both, and its checkpoint
        # fails while the schedule's run is in flight.
        obj.admit("t", "echo", "x")
        failures = 0

        def fail(location: str) -> None:
            nonlocal failures
            if failures == 0:
                failures += 1
                raise StorageError("checkpoint refused")

        obj.failpoints.install("maintenance:checkpoint:before", fail)
        (report,) = await obj.run_alarms(until=FIRST)
        assert report.phase == "failed"
        stored = row(obj, "sync")
        assert stored is not None and stored.pending_fire == FIRST
        assert stored.next_fire == FIRST + FIVE
        held = lane(obj, "sync")
        assert held is not None and held.state is LaneState.PARKED
        assert held.due_at is not None and held.due_at <= FIRST + FIVE, held
        # The cancelled fire runs again by the next fire time, which coalesces it.
        await obj.run_alarms(until=FIRST + FIVE + 30_000)
        assert [(fire, started) for _, fire, started, _ in runs.calls] == [
            (FIRST, FIRST), (FIRST + FIVE, FIRST + FIVE)]
        done = row(obj, "sync")
        assert done is not None and done.pending_fire is None and done.last_fire == FIRST + FIVE
        assert cancelled == 1  # the first run did see its cancellation


def test_a_run_cancelled_with_its_pass_keeps_the_lane_due_by_the_next_fire() -> None:
    asyncio.run(_scenario())
