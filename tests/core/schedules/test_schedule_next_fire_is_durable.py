"""The next fire time is durable: it is stored when the object first starts with the schedule,
and neither a restart nor the loss of the object moves it or loses it; a restarted object
arms its alarm for it without running anything early."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from schedules_support import HOUR, MINUTE, START, Runs, app_with_echo, clock, fire_ms, row

from threadline import ScheduleContext
from threadline.testing import SimulatedObject

FIRST = (START // HOUR + 1) * HOUR


async def _scenario() -> None:
    runs = Runs()
    app = app_with_echo()

    @app.every(timedelta(hours=1), id="hourly")
    async def hourly(ctx: ScheduleContext) -> None:
        runs.fires.append(("hourly", fire_ms(ctx)))

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        stored = row(obj, "hourly")
        assert stored is not None and stored.next_fire == FIRST
        await obj.run_alarms(until=START + MINUTE)  # a new object's first pass
        assert runs.of("hourly") == [] and obj.alarm_at == FIRST
        # Lost and restarted twice before the fire, later each time: nothing moves.
        for _ in range(2):
            obj.clock.advance(10 * MINUTE)
            await obj.evict()
            again = row(obj, "hourly")
            assert again == stored
            assert obj.alarm_at == FIRST
        await obj.run_alarms(until=FIRST - 1)
        assert runs.of("hourly") == []
        await obj.run_alarms(until=FIRST)
        assert runs.of("hourly") == [FIRST]
        done = row(obj, "hourly")
        assert done is not None and done.next_fire == FIRST + HOUR
        await obj.evict()
        assert row(obj, "hourly") == done
        assert obj.alarm_at == FIRST + HOUR


def test_the_next_fire_time_survives_restarts_and_the_alarm_is_armed_for_it() -> None:
    asyncio.run(_scenario())
