"""A storage failure while claiming (or completing) a lane stays with that lane: it is logged
and the lane is retried with backoff, while the pass, and the Attempts of Threads running in
it, go on untouched. The charge that replaces a refused claim is the wave's claim: a parking it
begins is reported with that pass."""

from __future__ import annotations

import asyncio
import random

from faults_support import CONFIG, build

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import StorageError
from threadline.maintenance import PassPhase
from threadline.maintenance.lanes import LaneRunner, WaveOutcome
from threadline.scheduling import LaneState
from threadline.storage import SqliteStorage
from threadline.storage.port import Rows, SqlValue
from threadline.testing import Effects, SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.turn import Turn

LANE = "probe.lane"
#: The claim's compare-and-set, and nothing else of the due queue.
CLAIM_SQL = "UPDATE tl_lanes SET due_at = ?, not_before = ?, stalls = ?"
#: An idle completion of a claimed lane.
COMPLETE_SQL = "WHERE id = ?\n AND revision = ?"


def _app(effects: Effects, clock: ManualClock) -> Application:
    app = Application()

    @app.agent("charges")
    async def charges(turn: Turn) -> dict[str, int]:
        async def charge() -> int:
            effects.hit("charge")
            await clock.sleep_until(clock.now_ms() + 10_000)
            return 7

        value = await turn.step("charge", charge, effect="uncertain")
        return {"charged": int(value)}  # type: ignore[arg-type]

    return app


async def _first_pass(failing: str, times: int) -> tuple[SimulatedObject, list[int], list[str]]:
    effects = Effects()
    clock = ManualClock()
    obj = SimulatedObject(_app(effects, clock), clock=clock)
    await obj.start()
    served: list[int] = []
    logs: list[str] = []

    async def handler(now: int, deadline: int) -> int | None:
        served.append(now)
        return None

    obj.space.lanes.register(LANE, handler, dispatch_timeout_ms=5_000)
    obj.space.lanes._log = logs.append
    start = clock.now_ms()
    obj.space.scheduler.gate.schedule(LANE, start)
    charged = obj.admit("t-a", "charges", {})
    obj.fail_statements(failing, times=times)
    await obj.run_alarms(until=obj.alarm_at)  # the one pass due now
    (report,) = obj.reports
    assert report.phase is PassPhase.ACTIONABLE, report
    assert (report.dispatched, report.settled) == (1, 1)
    assert obj.submission(charged.id).outcome is Outcome.COMPLETED
    assert effects.count("charge") == 1
    return obj, served, logs


def test_a_refused_lane_claim_is_that_lanes_failure_backed_off() -> None:
    async def body() -> None:
        obj, served, logs = await _first_pass(CLAIM_SQL, times=1)
        try:
            start = obj.reports[0].started_at
            assert served == []  # a wave it could not claim does not run
            lane = obj.space.scheduler.due_queue.get(LANE)
            assert lane is not None and lane.stalls == 1 and lane.due_at is not None
            ceiling = obj.app.config.alarm_backoff_base_ms * 2  # base * 2^stalls
            assert start + ceiling // 2 <= lane.due_at <= start + ceiling
            assert any(LANE in line and "StorageError" in line for line in logs)
            await obj.run_alarms()
            assert len(served) == 1
            lane = obj.space.scheduler.due_queue.get(LANE)
            assert lane is not None and lane.state is LaneState.IDLE
        finally:
            obj.close()

    asyncio.run(body())


def test_a_lane_storage_cannot_claim_at_all_never_fails_the_pass() -> None:
    async def body() -> None:
        obj, served, logs = await _first_pass(CLAIM_SQL, times=2)
        try:
            assert served == []
            lane = obj.space.scheduler.due_queue.get(LANE)
            assert lane is not None and lane.stalls == 0  # nothing could be written
            assert sum(LANE in line for line in logs) == 2
            await obj.run_alarms()
            assert len(served) == 1
        finally:
            obj.close()

    asyncio.run(body())


def test_a_refused_lane_completion_leaves_the_claims_backoff() -> None:
    async def body() -> None:
        obj, served, logs = await _first_pass(COMPLETE_SQL, times=1)
        try:
            assert len(served) == 1
            lane = obj.space.scheduler.due_queue.get(LANE)
            # Still charged and due at the claim's crash fallback: retried, then completed.
            assert lane is not None and lane.stalls == 1 and lane.due_at is not None
            assert any(LANE in line and "could not be completed" in line for line in logs)
            await obj.run_alarms()
            lane = obj.space.scheduler.due_queue.get(LANE)
            assert lane is not None and lane.state is LaneState.IDLE and len(served) == 2
        finally:
            obj.close()

    asyncio.run(body())


def _refusing(storage: SqliteStorage, times: int) -> list[int]:
    """Make the next ``times`` lane claims raise; returns the refusals left (one element)."""
    left = [times]
    real = storage.exec

    def exec(sql: str, *params: SqlValue) -> Rows:
        if left[0] > 0 and CLAIM_SQL in sql:
            left[0] -= 1
            raise StorageError("injected storage failure (lane claim)")
        return real(sql, *params)

    storage.exec = exec  # type: ignore[method-assign]
    return left


def test_a_wave_whose_claim_storage_refused_fails_naming_its_lane_and_the_charge(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    rig = build(storage, clock)
    runner = LaneRunner(storage, rig.sched.gate, rig.sched.due_queue, clock, CONFIG,
                        random.Random(5), log=rig.logs.append)
    served: list[int] = []

    async def handler(now: int, deadline: int) -> int | None:
        served.append(now)
        return None

    runner.register(LANE, handler, dispatch_timeout_ms=1_000)
    rig.sched.gate.schedule(LANE, clock.now_ms())
    lane = rig.sched.due_queue.get(LANE)
    assert lane is not None
    left = _refusing(storage, times=1)
    result = asyncio.run(runner.run_wave(lane))
    assert left == [0] and served == []
    assert (result.lane_id, result.outcome) == (LANE, WaveOutcome.FAILED)
    # The charge that replaced the refused claim is the wave's claim: what it backed off.
    assert result.claimed is not None and result.claimed == rig.sched.due_queue.get(LANE)
    assert result.claimed.stalls == 1 and not result.progressed


def test_a_lane_parked_by_the_charge_after_a_refused_claim_is_reported_in_that_pass() -> None:
    async def body() -> None:
        clock = ManualClock()
        async with SimulatedObject(_app(Effects(), clock), clock=clock) as obj:
            logs: list[str] = []

            async def handler(now: int, deadline: int) -> int | None:
                return None

            obj.space.lanes.register(LANE, handler, dispatch_timeout_ms=5_000)
            obj.space.lanes._log = logs.append
            obj.space.maintenance._log = logs.append
            obj.space.scheduler.gate.schedule(LANE, clock.now_ms())
            parks = obj.app.config.park_after_stalls
            obj.storage.exec("UPDATE tl_lanes SET stalls = ? WHERE id = ?", parks - 1, LANE)
            obj.fail_statements(CLAIM_SQL, times=1)
            await obj.run_alarms(until=obj.alarm_at)  # the one pass due now
            assert len(obj.reports) == 1
            lane = obj.space.scheduler.due_queue.get(LANE)
            assert lane is not None and lane.state is LaneState.PARKED and lane.reported
            assert [line for line in logs if "is parked" in line] == [
                f"threadline: maintenance lane {LANE!r} is parked after {parks} attempts "
                "without progress; retried hourly until it progresses"]

    asyncio.run(body())
