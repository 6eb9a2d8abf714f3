"""A cron schedule in a time zone fires at the right instants through the runner across both
daylight-saving changes of a year: a job at 02:30 Paris time fires once every day, at 03:00
on the spring night whose 02:30 does not exist and at the first 02:30 of the autumn night
that has two, with ``ctx.fire_time`` on the Paris wall clock."""

from __future__ import annotations

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo

from schedules_support import MINUTE, Runs, app_with_echo, clock, fire_ms

from threadline import ScheduleContext
from threadline.testing import SimulatedObject

PARIS = ZoneInfo("Europe/Paris")


def paris_ms(*parts: int, fold: int = 0) -> int:
    return int(datetime(*parts, tzinfo=PARIS, fold=fold).timestamp()) * 1000  # type: ignore[misc]


def paris(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, PARIS).isoformat(" ", "minutes")


async def _scenario() -> None:
    runs = Runs()
    walls: list[str] = []
    app = app_with_echo()

    @app.cron("30 2 * * *", tz="Europe/Paris", id="nightly")
    async def nightly(ctx: ScheduleContext) -> None:
        runs.fires.append(("nightly", fire_ms(ctx)))
        runs.calls.append(("nightly", fire_ms(ctx), obj.clock.now_ms(), None))
        walls.append(ctx.fire_time.isoformat(" ", "minutes"))

    start = paris_ms(2026, 1, 1, 12)
    end = paris_ms(2027, 1, 1, 12)
    async with SimulatedObject(app, clock=clock(start), check_alarm_invariant=True) as obj:
        await obj.run_alarms(until=end)
    fires = runs.of("nightly")
    assert len(fires) == 365
    assert len({paris(fire)[:10] for fire in fires}) == 365  # one a day, every day
    # Each run started at its fire instant: the alarm fired on time.
    assert [started for _, _, started, _ in runs.calls] == fires
    assert walls == [paris(fire) for fire in fires]  # fire_time is Paris wall time
    spring = fires.index(paris_ms(2026, 3, 28, 2, 30))
    assert [paris(fire) for fire in fires[spring:spring + 3]] == [
        "2026-03-28 02:30+01:00", "2026-03-29 03:00+02:00", "2026-03-30 02:30+02:00"]
    autumn = fires.index(paris_ms(2026, 10, 24, 2, 30))
    assert [paris(fire) for fire in fires[autumn:autumn + 3]] == [
        "2026-10-24 02:30+02:00", "2026-10-25 02:30+02:00", "2026-10-26 02:30+01:00"]
    assert paris_ms(2026, 10, 25, 2, 30, fold=1) not in fires
    assert all(fire % MINUTE == 0 for fire in fires)


def test_a_paris_cron_fires_once_a_day_through_the_runner_across_both_dst_changes() -> None:
    asyncio.run(_scenario())
