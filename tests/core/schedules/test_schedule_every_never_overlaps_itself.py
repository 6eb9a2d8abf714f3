"""An ``every`` schedule never overlaps itself: a run that outlasts its interval is followed by
the first fire after it ended, not by the fires it outlasted, and no run starts before the one
before it returned."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from itertools import pairwise

from schedules_support import MINUTE, START, Runs, app_with_echo, clock, fire_ms

from threadline import ScheduleContext
from threadline.testing import SimulatedObject


async def _scenario() -> None:
    runs = Runs()
    app = app_with_echo()

    @app.every(timedelta(minutes=1), id="slow", dispatch_timeout=timedelta(minutes=5))
    async def slow(ctx: ScheduleContext) -> None:
        started = obj.clock.now_ms()
        if not runs.calls:
            await obj.clock.sleep_until(started + 150_000)  # the first run takes 2.5 minutes
        runs.calls.append(("slow", fire_ms(ctx), started, obj.clock.now_ms()))

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        first = (START // MINUTE + 1) * MINUTE
        await obj.run_alarms(until=first + 6 * MINUTE)
    fires = [fire for _, fire, _, _ in runs.calls]
    assert fires == [first, first + 3 * MINUTE, first + 4 * MINUTE, first + 5 * MINUTE,
                     first + 6 * MINUTE]
    spans = [(started, ended) for _, _, started, ended in runs.calls]
    assert spans[0] == (first, first + 150_000)
    assert all(ended <= following for (_, ended), (following, _) in pairwise(spans))


def test_a_run_that_outlasts_its_interval_is_followed_by_the_first_fire_after_it() -> None:
    asyncio.run(_scenario())
