"""A lane whose claim storage keeps refusing backs off instead of firing the alarm every 500 ms.

When storage refuses both the claim of a due lane and the charge that would back it off,
nothing about the lane can be written: it stays due at its old time. The lane runner then
holds it in memory for this incarnation, ``backoff(stalls + refusals)`` away (growing,
jittered): it gets no wave before that, and the alarm decision counts it due no earlier. The
hold floors that lane's own due time only: other lanes and native work keep their alarm.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from itertools import pairwise

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import StorageError
from threadline.maintenance import PassPhase
from threadline.scheduling import LaneState
from threadline.storage.port import Rows, SqlValue
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)
LANE = "probe.lane"
OTHER = "probe.other"
#: The claim's compare-and-set (the charge that would back the lane off is the same one).
CLAIM_SQL = "UPDATE tl_lanes SET due_at = ?, not_before = ?, stalls = ?"
MINUTE = 60_000


def _app() -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: object) -> str:
        return "echo"

    return app


@dataclass
class _Refusal:
    """Storage refusing every claim of one lane (the others are written)."""

    lane: str
    on: bool = True
    #: When set, how many more claims are refused (then they are written again).
    left: int | None = None


def _refuse_claims(obj: SimulatedObject, lane: str) -> _Refusal:
    refusal = _Refusal(lane)
    storage = obj.storage
    real = storage.exec

    def exec(sql: str, *params: SqlValue) -> Rows:
        if (refusal.on and CLAIM_SQL in sql and refusal.lane in params
                and refusal.left != 0):
            if refusal.left is not None:
                refusal.left -= 1
            raise StorageError("injected storage failure (lane claim)")
        return real(sql, *params)

    storage.exec = exec  # type: ignore[method-assign]
    return refusal


async def _refusing(
    span_ms: int | None = None, passes: int | None = None
) -> tuple[SimulatedObject, list[int], list[int], list[str], _Refusal]:
    """Run an object whose LANE claim storage refuses, for ``span_ms`` or ``passes`` passes;
    return it (started), the pass starts (ms from the start), the waves served (epoch ms),
    the logs and the refusal."""
    clock = ManualClock()
    obj = SimulatedObject(_app(), clock=clock, check_alarm_invariant=True)
    await obj.start()
    start = clock.now_ms()
    served: list[int] = []
    logs: list[str] = []

    async def handler(now: int, deadline: int) -> int | None:
        served.append(now)
        return None

    obj.space.lanes.register(LANE, handler, dispatch_timeout_ms=5_000)
    obj.space.lanes._log = logs.append
    obj.space.scheduler.gate.schedule(LANE, start)
    refused = _refuse_claims(obj, LANE)
    if span_ms is not None:
        await obj.run_alarms(until=start + span_ms, max_passes=500)
    for _ in range(passes or 0):
        await obj.run_alarms(until=obj.alarm_at)
    starts = [report.started_at - start for report in obj.reports]
    return obj, starts, served, logs, refused


def test_a_lane_whose_claim_storage_keeps_refusing_backs_off() -> None:
    async def body() -> tuple[list[int], list[int]]:
        obj, starts, served, logs, _ = await _refusing(10 * MINUTE)
        try:
            assert served == []
            assert all(report.phase is not PassPhase.FAILED for report in obj.reports)
            assert sum("could not be backed off" in line for line in logs) == len(starts)
            lane = obj.space.scheduler.due_queue.get(LANE)
            assert lane is not None and lane.stalls == 0  # nothing could be written
        finally:
            obj.close()
        return starts, [later - earlier for earlier, later in pairwise(starts)]

    starts, gaps = asyncio.run(body())
    # Each refusal backs off further: base * 2^refusals, jittered over its upper half, capped.
    for refusals, gap in enumerate(gaps, start=1):
        ceiling = min(CONFIG.alarm_backoff_cap_ms, CONFIG.alarm_backoff_base_ms << refusals)
        assert ceiling // 2 <= gap <= ceiling, (refusals, gaps)
    # 60 passes in the first 30 s before (one per min_delay); 5 now, 9 in ten minutes.
    assert sum(1 for at in starts if at < 30_000) == 5, starts
    assert len(starts) == 9, starts


def test_a_held_lane_delays_neither_other_lanes_nor_native_work() -> None:
    async def body() -> None:
        obj, starts, served, _, refused = await _refusing(passes=4)
        clock = obj.clock
        try:
            assert len(starts) == 4 and clock.now_ms() == obj.reports[-1].started_at
            held_until = obj.alarm_at
            # The fourth refusal holds the lane backoff(4) away: 8 to 16 s.
            assert held_until is not None and held_until - clock.now_ms() >= 8_000
            other: list[int] = []

            async def other_handler(now: int, deadline: int) -> int | None:
                other.append(now)
                return None

            obj.space.lanes.register(OTHER, other_handler, dispatch_timeout_ms=5_000)
            admitted = clock.now_ms()
            obj.space.scheduler.gate.schedule(OTHER, admitted + 100)
            submission = obj.admit("t", "echo", {})
            await obj.run_alarms(until=admitted + 1_000)
            # Served at their own time (the minimum delay), not at the held lane's.
            assert other == [admitted + CONFIG.min_alarm_delay_ms]
            assert obj.submission(submission.id).outcome is Outcome.COMPLETED
            assert served == []
            # The held lane's floor still stands, for it alone.
            assert obj.alarm_at == held_until

            # Storage recovers: the lane gets its wave at the end of its hold, and is idle.
            refused.on = False
            await obj.run_alarms()
            assert served == [held_until]
            lane = obj.space.scheduler.due_queue.get(LANE)
            assert lane is not None and lane.state is LaneState.IDLE
            assert obj.alarm_at is None
        finally:
            obj.close()

    asyncio.run(body())


def test_a_charge_written_after_refusals_ends_the_hold_and_its_count() -> None:
    """Once storage writes the lane's charge again its durable row governs: the hold ends, and
    a later refusal counts from one again instead of going on from the former streak."""

    async def body() -> None:
        obj, starts, served, _, refused = await _refusing(passes=1)
        queue = obj.space.scheduler.due_queue
        try:
            assert len(starts) == 1 and served == []
            held_until = queue.held_until(LANE)
            assert held_until is not None and obj.alarm_at == held_until
            # At the end of the hold the claim is refused once more, but its charge is written.
            refused.left = 1
            await obj.run_alarms(until=held_until)
            assert refused.left == 0 and served == []
            lane = queue.get(LANE)
            assert lane is not None and lane.stalls == 1 and lane.due_at is not None
            assert queue.held_until(LANE) is None and queue.holds == {}
            # Refused for good again at its due time: held backoff(stalls + 1), not + 2.
            refused.left = 2
            await obj.run_alarms(until=lane.due_at)
            assert refused.left == 0
            again = queue.held_until(LANE)
            assert again is not None
            ceiling = CONFIG.alarm_backoff_base_ms << (lane.stalls + 1)
            assert ceiling // 2 <= again - obj.clock.now_ms() <= ceiling
        finally:
            obj.close()

    asyncio.run(body())
