"""An ``every`` schedule runs once per fire, at the fire time, through the object's alarm: the
function sees the scheduled time (not now), its submission is admitted under the fire's default
key and settles, and the next fire time is stored before anything else happens."""

from __future__ import annotations

import asyncio
from datetime import UTC, timedelta

from schedules_support import MINUTE, START, Runs, app_with_echo, clock, fire_ms, lane, row

from threadline import ScheduleContext
from threadline.schedules import fire_key
from threadline.testing import SimulatedObject
from threadline.threads import Outcome

FIVE = 5 * MINUTE
FIRST = (START // FIVE + 1) * FIVE


async def _scenario() -> None:
    runs = Runs()
    app = app_with_echo()

    @app.every(timedelta(minutes=5), id="pulse")
    async def pulse(ctx: ScheduleContext) -> None:
        runs.fires.append(("pulse", fire_ms(ctx)))
        runs.calls.append(("pulse", fire_ms(ctx), obj.clock.now_ms(), None))
        assert ctx.fire_time.tzinfo is UTC
        await ctx.submit("t", {"fire": ctx.fire_time.isoformat()})

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        stored, queued = row(obj, "pulse"), lane(obj, "pulse")
        assert stored is not None and stored.next_fire == FIRST
        assert queued is not None and queued.due_at == FIRST
        await obj.run_alarms(until=FIRST + 2 * FIVE + MINUTE)
        fires = [FIRST, FIRST + FIVE, FIRST + 2 * FIVE]
        assert runs.of("pulse") == fires
        # Each run started at its fire time: the alarm came on time, and fire_time is not now.
        assert [started for _, _, started, _ in runs.calls] == fires
        subs = obj.submissions("t")
        assert [sub.idempotency_key for sub in subs] == [fire_key("pulse", f) for f in fires]
        assert all(sub.outcome is Outcome.COMPLETED for sub in subs)
        assert subs[0].result == {"fire": "2023-11-14T22:15:00+00:00"}
        after = row(obj, "pulse")
        assert after is not None
        assert (after.last_fire, after.next_fire, after.pending_fire) == (
            FIRST + 2 * FIVE, FIRST + 3 * FIVE, None)
        assert obj.alarm_at == FIRST + 3 * FIVE


def test_an_every_schedule_runs_each_fire_at_its_time_and_its_submission_settles() -> None:
    asyncio.run(_scenario())
