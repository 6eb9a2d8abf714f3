"""A lane that makes progress never parks: each wave that acknowledges an event resets the
lane's stalls, however often it also runs past its dispatch timeout; only waves that move
nothing count toward ``park_after_stalls``."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.maintenance.faults import RecoveryEvent
from threadline.scheduling import RECOVERY_EVENTS, LaneState, read_state
from threadline.testing import SimulatedObject

HOUR = 3_600_000
EVENTS = 60
#: The hook's time per event: three fit in the lane's 30 s dispatch timeout, the fourth never.
HOOK_MS = 9_000


@dataclass
class Figures:
    """What three simulated hours of a slow hook left behind."""

    appended: int
    acknowledged: int
    stalls: int
    state: LaneState
    longest_gap_ms: int
    parked_reports: int
    deliveries: list[int] = field(repr=False)


async def _slow_hook_for_three_hours(hook_ms: int) -> Figures:
    clock = ManualClock()
    delivered: list[int] = []
    app = Application()

    @app.on_recovery_event
    async def hook(event: RecoveryEvent) -> None:
        await clock.sleep_until(clock.now_ms() + hook_ms)
        delivered.append(clock.now_ms())

    async with SimulatedObject(app, clock=clock) as obj:
        start = clock.now_ms()
        # Sixty Threads parked on an agent this deployment does not register: one event each.
        for index in range(EVENTS):
            obj.admit(f"t-{index:02d}", "not-registered", {})
        parked_logs: list[str] = []
        obj.space.maintenance._log = parked_logs.append
        await obj.run_alarms(until=start + 3 * HOUR)
        current = read_state(obj.storage)
        lane = obj.space.scheduler.due_queue.get(RECOVERY_EVENTS)
        assert lane is not None
        gaps = [later - earlier for earlier, later in itertools.pairwise(delivered)]
        return Figures(
            appended=current.recovery_event_seq,
            acknowledged=current.recovery_event_ack,
            stalls=lane.stalls,
            state=lane.state,
            longest_gap_ms=max(gaps, default=0),
            parked_reports=sum("is parked" in line for line in parked_logs),
            deliveries=delivered,
        )


def test_a_slow_hook_that_keeps_delivering_never_parks_its_lane() -> None:
    figures = asyncio.run(_slow_hook_for_three_hours(HOOK_MS))
    print(f"\n9 s hook, 3 simulated hours: {figures}")
    # Before: 60 appended, 42 acknowledged, stalls 14, parked, 59 minutes between deliveries.
    assert (figures.appended, figures.acknowledged) == (EVENTS, EVENTS)
    assert (figures.state, figures.stalls, figures.parked_reports) == (LaneState.IDLE, 0, 0)
    # Three deliveries per wave, the fourth cut at the timeout, then a fresh backoff (<= 1 s).
    assert figures.longest_gap_ms <= 30_000 - 3 * HOOK_MS + 1_000 + HOOK_MS
    assert figures.deliveries[-1] - figures.deliveries[0] < 15 * 60_000


def test_a_hook_that_never_finishes_an_event_still_parks_its_lane() -> None:
    figures = asyncio.run(_slow_hook_for_three_hours(31_000))
    # Nothing ever acknowledged: every wave is a stall, so the lane parks and is reported once.
    assert (figures.appended, figures.acknowledged) == (EVENTS, 0)
    assert figures.state is LaneState.PARKED and figures.stalls >= 12
    assert figures.parked_reports == 1
