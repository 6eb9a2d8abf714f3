"""No handler can hold the alarm handler: a recovery-event hook or lane handler that swallows
``CancelledError`` is cancelled at the end of its wave's allowance, given ``cancel_grace_ms``,
then abandoned, exactly as an agent is; the pass goes on to its final decision, and nothing
the abandoned code does later commits through its wave."""

from __future__ import annotations

import asyncio
import random

import pytest
from faults_support import CONFIG, Rig, build

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import SchedulingError
from threadline.maintenance import PassPhase
from threadline.maintenance.faults import RECOVERY_EVENTS_DISPATCH_TIMEOUT_MS, RecoveryEvent
from threadline.maintenance.lane_wave import current_wave
from threadline.maintenance.lanes import LaneRunner, WaveOutcome
from threadline.scheduling import AlarmDecision, read_state
from threadline.storage import SqliteStorage
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.turn import Turn

DAY = 86_400_000
LANE = "probe.lane"


async def _ignore_cancellation_for_a_day(clock: ManualClock) -> None:
    """Wait; when cancelled, swallow it and carry on for a day."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        await clock.sleep_until(clock.now_ms() + DAY)


def _app(clock: ManualClock, calls: list[int]) -> Application:
    app = Application()

    @app.on_recovery_event
    async def hook(event: RecoveryEvent) -> None:
        calls.append(event.seq)
        await _ignore_cancellation_for_a_day(clock)

    @app.agent("echo")
    async def echo(turn: Turn) -> dict[str, bool]:
        return {"ok": True}

    return app


async def _scenario() -> None:
    clock = ManualClock()
    calls: list[int] = []
    async with SimulatedObject(_app(clock, calls), clock=clock) as obj:
        start = clock.now_ms()
        obj.admit("t-parked", "not-registered", {})  # its parked event goes to the hook
        grace = obj.app.config.cancel_grace_ms
        await obj.run_alarms(until=start + 120_000)
        first = obj.reports[0]
        # Before: the first handler is still open a simulated day later.
        assert first.duration_ms <= RECOVERY_EVENTS_DISPATCH_TIMEOUT_MS + grace
        assert first.alarm is AlarmDecision.REARMED and first.phase is not PassPhase.FAILED
        assert len(obj.reports) > 1 and len(calls) == len(obj.reports)
        # Two minutes later a submission is admitted; the alarm serves it.
        later = obj.admit("t-served", "echo", {})
        await obj.run_alarms(until=clock.now_ms() + 120_000)
        assert obj.submission(later.id).outcome is Outcome.COMPLETED
        assert obj.alarm_at is not None  # the events lane keeps retrying, with backoff
        # The abandoned hooks acknowledged nothing; the event is still owed.
        assert read_state(obj.storage).recovery_event_ack == 0
        assert obj.space.lanes.abandoned == len(calls)


def test_a_hook_that_swallows_its_cancellation_cannot_hold_the_pass() -> None:
    asyncio.run(_scenario())


@pytest.fixture
def rig(storage: SqliteStorage, clock: ManualClock) -> Rig:
    return build(storage, clock)


def test_an_abandoned_lane_handler_commits_no_progress_after_its_wave(rig: Rig) -> None:
    runner = LaneRunner(rig.storage, rig.sched.gate, rig.sched.due_queue, rig.clock, CONFIG,
                        random.Random(5), log=rig.logs.append)
    late: list[BaseException] = []

    async def stubborn(now: int, deadline: int) -> int | None:
        wave = current_wave()
        assert wave is not None
        await _ignore_cancellation_for_a_day(rig.clock)
        try:
            rig.storage.transaction(wave.progress)
        except SchedulingError as exc:
            late.append(exc)
        return None

    runner.register(LANE, stubborn, dispatch_timeout_ms=1_000)

    async def body() -> None:
        rig.sched.gate.schedule(LANE, rig.clock.now_ms())
        lane = rig.sched.due_queue.get(LANE)
        assert lane is not None
        start = rig.clock.now_ms()
        wave = asyncio.ensure_future(runner.run_wave(lane))
        for _ in range(5):
            await asyncio.sleep(0)
        rig.clock.advance(1_000)  # the dispatch timeout: cancelled, and it swallows that
        for _ in range(5):
            await asyncio.sleep(0)
        assert not wave.done()  # within its grace
        rig.clock.advance(CONFIG.cancel_grace_ms)
        result = await asyncio.wait_for(wave, timeout=5)
        assert result.outcome is WaveOutcome.TIMED_OUT and not result.progressed
        assert rig.clock.now_ms() == start + 1_000 + CONFIG.cancel_grace_ms
        assert runner.abandoned == 1
        assert any("abandoned" in line and LANE in line for line in rig.logs)
        charged = rig.sched.due_queue.get(LANE)
        assert charged is not None and charged.stalls == 1
        # A day later the abandoned handler tries to report progress: refused, nothing written.
        rig.clock.advance(DAY)
        for _ in range(10):
            await asyncio.sleep(0)
        assert runner.abandoned == 0 and len(late) == 1
        assert rig.sched.due_queue.get(LANE) == charged

    asyncio.run(body())


def test_a_wave_cancelled_from_outside_cancels_its_handler_and_keeps_it_until_it_ends(
    rig: Rig,
) -> None:
    """The pass failing cancels the waves it started: the cancellation reaches the handler and
    propagates as itself, and a handler that ignores it stays referenced until it ends."""
    runner = LaneRunner(rig.storage, rig.sched.gate, rig.sched.due_queue, rig.clock, CONFIG,
                        random.Random(5), log=rig.logs.append)
    cancelled: list[int] = []

    async def stubborn(now: int, deadline: int) -> int | None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(rig.clock.now_ms())
            await rig.clock.sleep_until(rig.clock.now_ms() + DAY)
        return None

    runner.register(LANE, stubborn, dispatch_timeout_ms=1_000)

    async def body() -> None:
        rig.sched.gate.schedule(LANE, rig.clock.now_ms())
        lane = rig.sched.due_queue.get(LANE)
        assert lane is not None
        wave = asyncio.ensure_future(runner.run_wave(lane))
        for _ in range(5):
            await asyncio.sleep(0)
        wave.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wave
        for _ in range(5):
            await asyncio.sleep(0)
        assert cancelled == [rig.clock.now_ms()]
        assert runner.abandoned == 1
        rig.clock.advance(DAY)
        for _ in range(10):
            await asyncio.sleep(0)
        assert runner.abandoned == 0

    asyncio.run(body())
