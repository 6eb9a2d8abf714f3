"""The lane runner on its own: a failed wave's backoff counts from when the wave ended, a
stale snapshot is reported for its lane without running anything, and a wave ends as soon as
its handler returns."""

from __future__ import annotations

import asyncio
import random

import pytest
from faults_support import CONFIG, Rig, build

from threadline.clock import ManualClock
from threadline.errors import SchedulingError
from threadline.maintenance.lanes import (
    MAX_DISPATCH_TIMEOUT_MS,
    LaneHandler,
    LaneRunner,
    WaveOutcome,
    WaveResult,
)
from threadline.scheduling import NATIVE, Lane, LaneState
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


def _wave(
    rig: Rig, runner: LaneRunner, *, until: int | None = None, selected_at: int | None = None
) -> WaveResult:
    rig.sched.gate.schedule(LANE, rig.clock.now_ms())
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None
    return asyncio.run(runner.run_wave(lane, until=until, selected_at=selected_at))


def _charged(result: WaveResult, outcome: WaveOutcome) -> None:
    assert (result.lane_id, result.outcome) == (LANE, outcome)
    assert result.claimed is not None and result.claimed.stalls == 1


def test_each_wave_outcome_names_its_lane_and_its_charged_claim(rig: Rig) -> None:
    unhandled = _runner(rig)
    _charged(_wave(rig, unhandled), WaveOutcome.UNHANDLED)

    handlers: tuple[tuple[WaveOutcome, LaneHandler], ...] = (
        (WaveOutcome.COMPLETED, _returns_none),
        (WaveOutcome.FAILED, _raises),
        (WaveOutcome.TIMED_OUT, _hangs(rig.clock)),
    )
    for outcome, handler in handlers:
        rig = build(rig.storage, rig.clock)
        rig.storage.exec("DELETE FROM tl_lanes WHERE id = ?", LANE)
        runner = _runner(rig)
        runner.register(LANE, handler, dispatch_timeout_ms=1_000)
        _charged(_wave(rig, runner), outcome)


async def _returns_none(now: int, deadline: int) -> int | None:
    return None


async def _raises(now: int, deadline: int) -> int | None:
    raise RuntimeError("refused")


def _hangs(clock: ManualClock) -> LaneHandler:
    async def handler(now: int, deadline: int) -> int | None:
        clock.advance(deadline - now)  # the dispatch timeout passes while it waits
        await asyncio.Event().wait()
        return None

    return handler


def test_a_wave_whose_allowance_no_longer_fits_before_until_is_not_started(rig: Rig) -> None:
    runner = _runner(rig)
    seen: list[int] = []

    async def handler(now: int, deadline: int) -> int | None:
        seen.append(deadline - now)
        return None

    runner.register(LANE, handler, dispatch_timeout_ms=5_000)
    deferred = _wave(rig, runner, until=rig.clock.now_ms() + 4_999)
    assert (deferred.outcome, deferred.claimed) == (WaveOutcome.DEFERRED, None)
    kept = rig.sched.due_queue.get(LANE)
    assert kept is not None and kept.due_at == rig.clock.now_ms() and kept.stalls == 0
    _wave(rig, runner, until=rig.clock.now_ms() + 5_000)
    _wave(rig, runner, until=rig.clock.now_ms() + 9_000)
    _wave(rig, runner)
    # Chosen when it still fitted (the pass's start): it runs, its deadline capped at until.
    _wave(rig, runner, until=rig.clock.now_ms() + 2_000,
          selected_at=rig.clock.now_ms() - 3_000)
    assert seen == [5_000, 5_000, 5_000, 2_000]


class _Holding:
    """A gate with a mutation in flight that enrolled ``held``."""

    def active_lanes(self) -> frozenset[str]:
        return frozenset({"held"})


def _lane(lane_id: str, due_at: int | None) -> Lane:
    state = LaneState.IDLE if due_at is None else LaneState.DUE
    return Lane(lane_id, due_at, 0, 1, 0, state, False, 0)


def test_due_lanes_are_the_non_native_ones_due_now_and_not_held(rig: Rig) -> None:
    runner = LaneRunner(rig.storage, _Holding(), rig.sched.due_queue,  # type: ignore[arg-type]
                        rig.clock, CONFIG, random.Random(5))
    now = 5_000
    lanes = [_lane(NATIVE, now - 1), _lane("idle", None), _lane("later", now + 1),
             _lane("held", now - 1), _lane("at-now", now), _lane("overdue", now - 9)]
    assert [lane.id for lane in runner.due(lanes, now)] == ["at-now", "overdue"]


def test_an_unhandled_due_lane_is_logged_through_the_given_log(rig: Rig) -> None:
    _charged(_wave(rig, _runner(rig)), WaveOutcome.UNHANDLED)
    assert len(rig.logs) == 1 and LANE in rig.logs[0] and "no registered handler" in rig.logs[0]


def test_register_accepts_dispatch_timeouts_up_to_the_maximum(rig: Rig) -> None:
    runner = _runner(rig)
    runner.register("a.lane", _returns_none, dispatch_timeout_ms=MAX_DISPATCH_TIMEOUT_MS)
    runner.register("b.lane", _returns_none, dispatch_timeout_ms=1)
    for bad in (0, MAX_DISPATCH_TIMEOUT_MS + 1):
        with pytest.raises(SchedulingError):
            runner.register("c.lane", _returns_none, dispatch_timeout_ms=bad)
    with pytest.raises(SchedulingError):
        runner.register(NATIVE, _returns_none, dispatch_timeout_ms=1)
    assert runner.registered == {"a.lane", "b.lane"}


def test_a_wave_ends_when_its_handler_returns_not_at_its_deadline(rig: Rig) -> None:
    runner = _runner(rig)
    runner.register(LANE, _returns_none, dispatch_timeout_ms=MAX_DISPATCH_TIMEOUT_MS)

    async def body() -> None:
        rig.sched.gate.schedule(LANE, rig.clock.now_ms())
        lane = rig.sched.due_queue.get(LANE)
        assert lane is not None
        wave = asyncio.ensure_future(runner.run_wave(lane))
        for _ in range(10):  # the clock never moves
            await asyncio.sleep(0)
        assert wave.done(), "the wave waited for its dispatch timeout"
        assert wave.result().outcome is WaveOutcome.COMPLETED

    asyncio.run(body())
