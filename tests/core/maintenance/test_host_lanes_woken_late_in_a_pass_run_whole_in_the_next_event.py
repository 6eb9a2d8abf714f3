"""A lane woken during a pass gets its wave in the pass's second round only if its whole
allowance still fits before the event deadline. Otherwise it is not started: it stays due,
uncharged, and the next event runs it with its full allowance. Before, the wave was cut at the
event deadline, counted as a failure (logged, backed off) and run again."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from host_lanes_support import START, clock, lane

from threadline import Application, LaneContext, RuntimeConfig, Turn
from threadline.testing import SimulatedObject

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=60_000,
                       lease_ms=3_600_000)
#: Each Attempt takes this long: three of them end 15 s before the 840 s event deadline.
ATTEMPT_MS = 275_000
ALLOWANCE_MS = 30_000


async def _scenario() -> tuple[list[tuple[int, int]], list[int]]:
    app = Application(CONFIG)
    started: list[tuple[int, int]] = []  # (start, deadline) of each wave
    ended: list[int] = []

    @app.agent("slow")
    async def slow(turn: Turn) -> str:
        if turn.input == 0:
            await turn.wake_lane("report")
        await obj.clock.sleep_until(obj.clock.now_ms() + ATTEMPT_MS)
        return "ok"

    @app.lane("report", dispatch_timeout=timedelta(milliseconds=ALLOWANCE_MS))
    async def report(ctx: LaneContext) -> None:
        now = obj.clock.now_ms()
        started.append((now, int(ctx.deadline.timestamp() * 1000)))
        await obj.clock.sleep_until(now + 20_000)  # healthy: 20 s of its 30 s
        ended.append(obj.clock.now_ms())
        ctx.progress()

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        for i in range(3):
            obj.admit("t", "slow", i)
        await obj.run_alarms(until=START + 3_000_000)
        row = lane(obj, "report")
        assert row is not None and row.due_at is None and row.stalls == 0
    return started, ended


def test_a_lane_woken_late_in_a_pass_runs_with_its_whole_allowance_in_the_next_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="threadline.maintenance"):
        started, ended = asyncio.run(_scenario())
    # One wave, with its whole allowance, after the pass that woke it.
    assert len(started) == 1 and len(ended) == 1, (started, ended)
    (start, deadline), = started
    assert deadline - start == ALLOWANCE_MS
    assert start >= START + 3 * ATTEMPT_MS
    assert not [r for r in caplog.records if "report" in r.getMessage()]
