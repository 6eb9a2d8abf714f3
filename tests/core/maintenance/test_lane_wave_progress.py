"""A wave's progress (:meth:`Wave.progress`) is never a stall: it resets the lane's stalls in
the transaction of the step it reports, so a failure after it backs off from a fresh budget and
a parked lane that progresses is no longer parked; the wave still completes its lane."""

from __future__ import annotations

import asyncio
import random

import pytest
from faults_support import CONFIG, Rig, build

from threadline.clock import ManualClock
from threadline.errors import Evicted, SchedulingError
from threadline.maintenance.lane_wave import current_wave
from threadline.maintenance.lanes import LaneRunner, WaveOutcome, WaveResult
from threadline.scheduling import LaneState
from threadline.storage import SqliteStorage

LANE = "probe.lane"


@pytest.fixture
def rig(storage: SqliteStorage, clock: ManualClock) -> Rig:
    return build(storage, clock)


def _runner(rig: Rig, handler: object, *, stalls: int = 0) -> LaneRunner:
    runner = LaneRunner(rig.storage, rig.sched.gate, rig.sched.due_queue, rig.clock, CONFIG,
                        random.Random(5), log=rig.logs.append)
    runner.register(LANE, handler, dispatch_timeout_ms=5_000)  # type: ignore[arg-type]
    rig.sched.gate.schedule(LANE, rig.clock.now_ms())
    if stalls:
        rig.storage.exec("UPDATE tl_lanes SET stalls = ? WHERE id = ?", stalls, LANE)
    return runner


def _wave(rig: Rig, runner: LaneRunner) -> WaveResult:
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None
    return asyncio.run(runner.run_wave(lane))


def _progress() -> None:
    wave = current_wave()
    assert wave is not None and not wave.ended
    wave.progress()


def test_a_wave_that_progresses_then_fails_backs_off_from_a_fresh_budget(rig: Rig) -> None:
    async def delivers_then_fails(now: int, deadline: int) -> int | None:
        rig.storage.transaction(_progress)
        raise RuntimeError("the next delivery was refused")

    runner = _runner(rig, delivers_then_fails, stalls=8)
    result = _wave(rig, runner)
    assert (result.outcome, result.progressed) == (WaveOutcome.FAILED, True)
    assert result.claimed is not None and result.claimed.stalls == 9  # what the claim charged
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None and lane.stalls == 0 and lane.due_at is not None
    base = CONFIG.alarm_backoff_base_ms  # backoff(0), not backoff(9)
    now = rig.clock.now_ms()
    assert now + base // 2 <= lane.due_at <= now + base


def test_a_parked_lane_that_progresses_is_due_again_and_not_reported(rig: Rig) -> None:
    async def delivers(now: int, deadline: int) -> int | None:
        rig.storage.transaction(_progress)
        return now + 60_000

    runner = _runner(rig, delivers, stalls=CONFIG.park_after_stalls - 1)
    result = _wave(rig, runner)
    assert result.claimed is not None and result.claimed.state is LaneState.PARKED
    assert result.progressed and not result.newly_parked
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None
    assert (lane.state, lane.stalls, lane.due_at) == (
        LaneState.DUE, 0, rig.clock.now_ms() + 60_000)  # not held to the hourly floor
    assert rig.sched.due_queue.take_parked_reports() == []


def test_a_wave_without_progress_is_still_a_stall(rig: Rig) -> None:
    async def moves_nothing(now: int, deadline: int) -> int | None:
        raise RuntimeError("refused")

    runner = _runner(rig, moves_nothing, stalls=3)
    result = _wave(rig, runner)
    assert not result.progressed
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None and lane.stalls == 4


def test_progress_must_commit_with_its_step(rig: Rig) -> None:
    refused: list[Exception] = []

    async def outside(now: int, deadline: int) -> int | None:
        try:
            _progress()
        except SchedulingError as exc:
            refused.append(exc)
        return None

    result = _wave(rig, _runner(rig, outside))
    assert len(refused) == 1 and not result.progressed
    assert current_wave() is None  # only code inside a wave sees one


def test_a_wave_lost_after_its_progress_is_due_again_within_the_base_backoff(rig: Rig) -> None:
    """Progress brings the claim's crash fallback (a parked lane's was an hour away) to
    ``alarm_backoff_base_ms`` after the step: not later, and not at once either."""
    stepped: list[int] = []

    async def delivers_then_is_lost(now: int, deadline: int) -> int | None:
        rig.clock.advance(250)
        rig.storage.transaction(_progress)
        stepped.append(rig.clock.now_ms())
        raise Evicted("lost mid-wave")

    runner = _runner(rig, delivers_then_is_lost, stalls=CONFIG.park_after_stalls - 1)
    with pytest.raises(Evicted):
        _wave(rig, runner)
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None
    assert (lane.state, lane.stalls) == (LaneState.DUE, 0)
    assert lane.due_at == stepped[0] + CONFIG.alarm_backoff_base_ms
