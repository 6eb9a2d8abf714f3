"""Fires missed while the object could not run coalesce into one run with the latest missed
fire time: after a month of downtime an ``every`` schedule and a weekday cron each run once,
never a burst, and go on from the first fire after the object came back."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from schedules_support import DAY, MINUTE, START, Runs, app_with_echo, clock, fire_ms, row

from threadline import ScheduleContext
from threadline.testing import SimulatedObject

FIVE = 5 * MINUTE
PARIS = ZoneInfo("Europe/Paris")


def paris_ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=PARIS).timestamp()) * 1000  # type: ignore[misc]


async def _scenario() -> None:
    runs = Runs()
    app = app_with_echo()

    @app.every(timedelta(minutes=5), id="pulse")
    async def pulse(ctx: ScheduleContext) -> None:
        runs.fires.append(("pulse", fire_ms(ctx)))
        await ctx.submit("pulse", fire_ms(ctx))

    @app.cron("0 9 * * MON-FRI", tz="Europe/Paris", id="digest")
    async def digest(ctx: ScheduleContext) -> None:
        runs.fires.append(("digest", fire_ms(ctx)))

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        first = (START // FIVE + 1) * FIVE
        await obj.run_alarms(until=first)
        assert runs.of("pulse") == [first]
        # A month (30 days and a bit) during which the object cannot run at all.
        back = first + 30 * DAY + 7 * MINUTE + 1_234
        obj.clock.set(back)
        await obj.evict()
        await obj.run_alarms(until=back + MINUTE)
        latest = back // FIVE * FIVE
        assert runs.of("pulse") == [first, latest]
        # 2023-12-14 is a Thursday: the last missed weekday 09:00 in Paris is that morning.
        assert runs.of("digest") == [paris_ms(2023, 12, 14, 9)]
        assert len(obj.submissions("pulse")) == 2
        stored = row(obj, "pulse")
        assert stored is not None and stored.next_fire == latest + FIVE
        await obj.run_alarms(until=latest + 2 * FIVE)
        assert runs.of("pulse") == [first, latest, latest + FIVE, latest + 2 * FIVE]


def test_a_month_of_downtime_coalesces_into_one_run_of_the_latest_missed_fire() -> None:
    asyncio.run(_scenario())
