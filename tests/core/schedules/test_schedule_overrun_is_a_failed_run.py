"""A run that outlasts its ``dispatch_timeout`` is cancelled and counts as a failed run: the
failure is recorded (``Cancelled``), the same fire is retried with backoff, and a retry that
returns in time completes it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from schedules_support import MINUTE, START, Runs, app_with_echo, clock, fire_ms, row

from threadline import ScheduleContext
from threadline.testing import SimulatedObject

FIRST = (START // MINUTE + 1) * MINUTE


async def _scenario() -> None:
    runs = Runs()
    app = app_with_echo()

    @app.every(timedelta(minutes=1), id="slow", dispatch_timeout=timedelta(seconds=2))
    async def slow(ctx: ScheduleContext) -> None:
        runs.calls.append(("slow", fire_ms(ctx), obj.clock.now_ms(), None))
        await ctx.submit("t", fire_ms(ctx))
        if len(runs.calls) == 1:
            await obj.clock.sleep_until(obj.clock.now_ms() + 10_000)  # past its allowance
        runs.fires.append(("slow", fire_ms(ctx)))

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        await obj.run_alarms(until=FIRST + 2_000)
        failed = row(obj, "slow")
        assert failed is not None
        assert (failed.pending_fire, failed.failures, failed.last_error_type) == (
            FIRST, 1, "Cancelled")
        [view] = obj.space.api.maintenance.schedules()
        assert view["state"] == "retrying"
        await obj.run_alarms(until=FIRST + MINUTE - 1)
        assert [fire for _, fire, _, _ in runs.calls] == [FIRST, FIRST]
        assert runs.of("slow") == [FIRST]
        done = row(obj, "slow")
        assert done is not None and (done.pending_fire, done.last_fire) == (None, FIRST)
        assert len(obj.submissions("t")) == 1  # the retry replayed the first run's admission


def test_a_run_past_its_allowance_is_cancelled_recorded_and_retried() -> None:
    asyncio.run(_scenario())
