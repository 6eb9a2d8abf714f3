"""An object restarted with the same schedules and host lanes (most alarms of an idle object
start it cold: the platform evicts it between them) reads the same rows at start-up with one
schedule declared or a hundred: the schedules' and host lanes' rows are read only when a deploy
changed the declarations. A change is still applied: a schedule added starts, one removed is
dropped, a host lane removed is dropped."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from schedules_support import HOUR, MINUTE, START, app_with_echo, clock, lane, row

from threadline import Application, LaneContext, ScheduleContext
from threadline.clock import from_epoch_ms
from threadline.storage.meter import MeterReading
from threadline.testing import SimulatedObject


async def idle(ctx: ScheduleContext) -> None:
    return None


def _app(schedules: int, *, lanes: tuple[str, ...] = ()) -> Application:
    app = app_with_echo()
    for i in range(schedules):
        app.every(timedelta(days=300), id=f"idle-{i}")(idle)
    for name in lanes:

        @app.lane(name)
        async def run(ctx: LaneContext) -> None:
            return None

    return app


async def _cold_start(schedules: int) -> MeterReading:
    async with SimulatedObject(_app(schedules), clock=clock(),
                               check_alarm_invariant=True) as obj:
        await obj.run_alarms(until=START + 10 * MINUTE)
        # A new incarnation over the same file, as after the platform evicted the idle object:
        # its storage (and meter) is new, so what it read is what its start-up read.
        await obj.evict()
        return obj.storage.meter.reading()


def test_an_unchanged_object_starts_in_the_same_rows_with_one_schedule_or_a_hundred() -> None:
    one, hundred = asyncio.run(_cold_start(1)), asyncio.run(_cold_start(100))
    print(f"cold start: 1 schedule {one}; 100 schedules {hundred}")
    assert hundred.rows_read == one.rows_read == 6  # as README "Schedules" says
    assert hundred.rows_written == one.rows_written == 0


async def _changes() -> None:
    async with SimulatedObject(_app(2, lanes=("sync",)), clock=clock(),
                               check_alarm_invariant=True) as obj:
        obj.wake_lane("sync")
        await obj.run_alarms(until=START + MINUTE)
        obj.wake_lane("sync", from_epoch_ms(obj.clock.now_ms() + HOUR))
        assert row(obj, "idle-1") is not None and lane(obj, "sync") is not None
        # One schedule more, one fewer, and the host lane gone: all applied at start-up.
        app = app_with_echo()
        app.every(timedelta(days=300), id="idle-0")(idle)
        app.every(timedelta(minutes=5), id="added")(idle)
        await obj.redeploy(app)
        added = row(obj, "added")
        assert added is not None and added.next_fire > obj.clock.now_ms()
        added_lane = lane(obj, "added")
        assert added_lane is not None and added_lane.due_at == added.next_fire
        assert row(obj, "idle-1") is None and lane(obj, "idle-1") is None
        assert lane(obj, "sync") is None
        kept = row(obj, "idle-0")
        assert kept is not None
        # Deployed again unchanged: nothing is read of them, nothing written.
        await obj.redeploy(app)
        assert obj.storage.meter.reading().rows_written == 0
        assert row(obj, "idle-0") == kept


def test_a_deploy_that_changes_the_declarations_still_starts_and_drops_them() -> None:
    asyncio.run(_changes())
