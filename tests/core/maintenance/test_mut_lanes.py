"""The lane runner on its own: a failed wave's backoff counts from when the wave ended, and a
stale snapshot is reported for its lane without running anything."""

from __future__ import annotations

import asyncio
import random

import pytest
from faults_support import CONFIG, Rig, build

from threadline.clock import ManualClock
from threadline.maintenance.lanes import LaneRunner, WaveOutcome
from threadline.storage import SqliteStorage

LANE = "probe.lane"


@pytest.fixture
def rig(storage: SqliteStorage, clock: ManualClock) -> Rig:
    return build(storage, clock)


def _runner(rig: Rig) -> LaneRunner:
    return LaneRunner(rig.storage, rig.sched.gate, rig.sched.due_queue, rig.clock, CONFIG,
                      random.Random(5), log=rig.logs.append)


def test_a_slow_failing_wave_backs_off_from_its_end_not_from_its_claim(rig: Rig) -> None:
    runner = _runner(rig)

    async def slow_then_fails(now: int, deadline: int) -> int | None:
        rig.clock.advance(20_000)  # far beyond the claim's crash-fallback deadline
        raise RuntimeError("upstream refused")

    runner.register(LANE, slow_then_fails, dispatch_timeout_ms=60_000)
    rig.sched.gate.schedule(LANE, rig.clock.now_ms())
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None
    result = asyncio.run(runner.run_wave(lane))
    assert result.outcome is WaveOutcome.FAILED
    after = rig.sched.due_queue.get(LANE)
    assert after is not None and after.due_at is not None and after.stalls == 1
    # b = base * 2**stalls, jittered over [b/2, b], counted from the failure.
    ceiling = CONFIG.alarm_backoff_base_ms * 2
    assert rig.clock.now_ms() + ceiling // 2 <= after.due_at <= rig.clock.now_ms() + ceiling


def test_a_wave_over_a_stale_snapshot_runs_nothing_and_names_its_lane(rig: Rig) -> None:
    runner = _runner(rig)
    calls: list[int] = []

    async def handler(now: int, deadline: int) -> int | None:
        calls.append(now)
        return None

    runner.register(LANE, handler, dispatch_timeout_ms=1_000)
    rig.sched.gate.schedule(LANE, rig.clock.now_ms())
    snapshot = rig.sched.due_queue.get(LANE)
    assert snapshot is not None
    assert asyncio.run(runner.run_wave(snapshot)).outcome is WaveOutcome.COMPLETED
    stale = asyncio.run(runner.run_wave(snapshot))
    assert (stale.lane_id, stale.outcome, stale.claimed) == (LANE, WaveOutcome.STALE, None)
    assert len(calls) == 1
