"""A wave that fixed its lane's next deadline with ``Wave.due_by`` is due again by then however
it ends: a failure's backoff and a parking's hourly floor do not postpone it (the lane still
counts the stall and parks); a completed wave still names its own next deadline."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from host_lanes_support import CONFIG, START, at, clock, lane

from threadline import Application, LaneContext
from threadline.maintenance.lane_wave import current_wave
from threadline.scheduling import LaneState
from threadline.testing import SimulatedObject

FIXED = START + 3_600_000


async def _scenario(fail: bool) -> list[int]:
    starts: list[int] = []
    app = Application(CONFIG)

    @app.lane("feed")
    async def feed(ctx: LaneContext) -> datetime | None:
        starts.append(obj.clock.now_ms())
        wave = current_wave()
        assert wave is not None
        wave.due_by(FIXED if obj.clock.now_ms() < FIXED else FIXED + 3_600_000 * 5)
        if fail:
            raise ConnectionError("feed unreachable")
        return ctx.now + timedelta(hours=2)

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        obj.wake_lane("feed", at(START))
        await obj.run_alarms(until=FIXED - 1)
        row = lane(obj, "feed")
        assert row is not None
        if fail:
            assert row.state is LaneState.PARKED  # 12 failures within half an hour
            assert row.due_at == FIXED  # not START + an hour
        else:
            assert row.due_at == starts[0] + 2 * 3_600_000  # its own deadline wins
        await obj.run_alarms(until=FIXED)
    return starts


def test_a_failing_wave_is_due_again_by_its_fixed_deadline_even_when_parked() -> None:
    starts = asyncio.run(_scenario(fail=True))
    assert starts[-1] == FIXED and all(start < FIXED for start in starts[:-1])
    assert len(starts) == CONFIG.park_after_stalls + 1


def test_a_completed_wave_names_its_own_next_deadline() -> None:
    assert len(asyncio.run(_scenario(fail=False))) == 1
