"""What one fire costs in rows, on the CPython meter (the sqlite3 approximation: rows returned
and rows changed, not index entries; workerd bills a few more, see scenario 8 of
``scripts/bench``): the alarm that runs a fire reads and writes a handful of rows, the same
whether the object declares one schedule or a hundred more that are not due. Run with ``-s`` to
see the figures."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from schedules_support import MINUTE, START, app_with_echo, clock, fire_ms

from threadline import ScheduleContext
from threadline.maintenance import PassReport
from threadline.testing import SimulatedObject

FIVE = 5 * MINUTE
SECOND_FIRE = (START // FIVE + 2) * FIVE


async def _passes(submit: bool, idle_schedules: int) -> list[PassReport]:
    """The passes of the second fire of a five-minute schedule (the first is a new object's)."""
    app = app_with_echo()

    @app.every(timedelta(minutes=5), id="pulse")
    async def pulse(ctx: ScheduleContext) -> None:
        if submit:
            await ctx.submit("t", fire_ms(ctx))

    async def idle(ctx: ScheduleContext) -> None:
        return None

    for n in range(idle_schedules):
        app.every(timedelta(days=300), id=f"idle-{n}")(idle)
    async with SimulatedObject(app, clock=clock()) as obj:
        await obj.run_alarms(until=SECOND_FIRE + MINUTE)
        return [report for report in obj.reports if report.started_at >= SECOND_FIRE]


@pytest.mark.parametrize("submit", [False, True], ids=["no-submission", "one-submission"])
def test_a_fire_reads_and_writes_a_few_rows_whatever_else_is_scheduled(submit: bool) -> None:
    alone = asyncio.run(_passes(submit, 0))
    crowded = asyncio.run(_passes(submit, 100))
    figures = [(r.rows_read, r.rows_written, r.statements) for r in alone]
    assert figures == [(r.rows_read, r.rows_written, r.statements) for r in crowded]
    fire = alone[0]
    print(f"\nrows per fire ({'one submission' if submit else 'no submission'}, sqlite3 "
          f"approximation): the fire's alarm read {fire.rows_read}, wrote {fire.rows_written}"
          + ("" if not submit else f"; the submission's own alarm read {alone[1].rows_read}, "
             f"wrote {alone[1].rows_written}"))
    if submit:
        assert len(alone) == 2 and alone[1].settled == 1
        assert fire.rows_read <= 15 and fire.rows_written <= 8
    else:
        assert len(alone) == 1
        assert fire.rows_read <= 11 and fire.rows_written <= 5
