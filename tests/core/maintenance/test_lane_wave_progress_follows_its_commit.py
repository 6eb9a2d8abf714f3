"""A wave's progress counts only once the transaction that reports it commits.

:meth:`Wave.progress` resets the lane's stalls inside the step's transaction. Should that
transaction roll back (the step's write refused, say), neither the reset nor the step
happened: the wave has not progressed, so a failure after it backs off from the stalls still
stored, and a parking its claim began is reported, as for any wave that moved nothing.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from contextlib import suppress

import pytest
from faults_support import CONFIG, Rig, build

from threadline.clock import ManualClock
from threadline.maintenance.lane_wave import current_wave
from threadline.maintenance.lanes import LaneRunner, WaveOutcome, WaveResult
from threadline.scheduling import LaneState
from threadline.storage import SqliteStorage

LANE = "probe.lane"


class _Refused(Exception):
    """The step's own write was refused: its transaction rolls back."""


@pytest.fixture
def rig(storage: SqliteStorage, clock: ManualClock) -> Rig:
    return build(storage, clock)


def _runner(rig: Rig, handler: object, *, stalls: int) -> LaneRunner:
    runner = LaneRunner(rig.storage, rig.sched.gate, rig.sched.due_queue, rig.clock, CONFIG,
                        random.Random(5), log=rig.logs.append)
    runner.register(LANE, handler, dispatch_timeout_ms=5_000)  # type: ignore[arg-type]
    rig.sched.gate.schedule(LANE, rig.clock.now_ms())
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


def _progress_then_refused() -> None:
    _progress()
    raise _Refused


def _rolled_back(rig: Rig) -> None:
    with suppress(_Refused):
        rig.storage.transaction(_progress_then_refused)


def test_a_failure_after_progress_that_rolled_back_backs_off_from_the_stored_stalls(
    rig: Rig,
) -> None:
    async def refused_then_fails(now: int, deadline: int) -> int | None:
        _rolled_back(rig)
        raise RuntimeError("nothing was delivered")

    runner = _runner(rig, refused_then_fails, stalls=8)
    result = _wave(rig, runner)
    assert (result.outcome, result.progressed) == (WaveOutcome.FAILED, False)
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None and lane.stalls == 9 and lane.due_at is not None
    # backoff(9), as for a wave that moved nothing: not backoff(0) from a reset never stored.
    ceiling = min(CONFIG.alarm_backoff_cap_ms, CONFIG.alarm_backoff_base_ms << 9)
    now = rig.clock.now_ms()
    assert now + ceiling // 2 <= lane.due_at <= now + ceiling
    assert any("stalls=9" in line for line in rig.logs), rig.logs


def test_a_parking_whose_progress_rolled_back_is_reported(rig: Rig) -> None:
    async def refused(now: int, deadline: int) -> int | None:
        _rolled_back(rig)
        return now + 60_000

    runner = _runner(rig, refused, stalls=CONFIG.park_after_stalls - 1)
    result = _wave(rig, runner)
    assert not result.progressed and result.newly_parked
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None and lane.state is LaneState.PARKED
    (reported,) = rig.sched.due_queue.take_parked_reports()
    assert reported.id == LANE


def _outer_refused_inner_commits(rig: Rig) -> None:
    def outer() -> None:
        rig.storage.transaction(_progress)
        raise _Refused

    with suppress(_Refused):
        rig.storage.transaction(outer)


def _inner_refused_outer_commits(rig: Rig) -> None:
    rig.storage.transaction(lambda: _rolled_back(rig))


def _both_commit(rig: Rig) -> None:
    rig.storage.transaction(lambda: rig.storage.transaction(_progress))


@pytest.mark.parametrize(("step", "progressed"), [
    (_outer_refused_inner_commits, False),
    (_inner_refused_outer_commits, False),
    (_both_commit, True),
])
def test_progress_in_a_nested_transaction_counts_once_the_whole_of_it_commits(
    rig: Rig, step: Callable[[Rig], None], progressed: bool,
) -> None:
    async def handler(now: int, deadline: int) -> int | None:
        step(rig)
        raise RuntimeError("the next delivery was refused")

    runner = _runner(rig, handler, stalls=4)
    result = _wave(rig, runner)
    assert result.progressed is progressed
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None and lane.due_at is not None
    stalls = 0 if progressed else 5
    assert lane.stalls == stalls
    ceiling = min(CONFIG.alarm_backoff_cap_ms, CONFIG.alarm_backoff_base_ms << stalls)
    assert lane.due_at <= rig.clock.now_ms() + ceiling
