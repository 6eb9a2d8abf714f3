"""Random faults, binding waits, deliveries, failing hooks and evictions over one file.

The lane is driven as the lane runner drives it: claim, run the wave, complete it idle only
when the wave delivered everything (a compare-and-set on the revision, so events appended
during the wave keep it due). After every step: each unacknowledged event has its lane due
with an alarm; first deliveries are exactly 1, 2, 3, ... in order; nothing is acknowledged
that was not delivered. At the end every appended event has been delivered.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from faults_support import Rig, build, pending_events_are_due
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.maintenance.faults import RecoveryEvent
from threadline.scheduling import RECOVERY_EVENTS, read_state
from threadline.storage import SqliteStorage

THREADS = st.sampled_from(["t1", "t2", "t3"])
SUBMISSIONS = st.lists(st.sampled_from(["s1", "s2", "s3", "s4"]), max_size=3)


class HostFailure(Exception):
    pass


class EventLog(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "object.db"
        self.clock = ManualClock(start_ms=1_000_000)
        # What the host received, across evictions (the host outlives the object).
        self.delivered: list[int] = []
        self.fail_seq: int | None = None
        self.crash_seq: int | None = None
        self.rig = self._start()

    def _start(self) -> Rig:
        return build(SqliteStorage(self.path), self.clock, self._hook)

    async def _hook(self, event: RecoveryEvent) -> None:
        assert event.seq >= 1
        if event.seq == self.fail_seq:
            raise HostFailure(str(event.seq))
        self.delivered.append(event.seq)
        if event.seq == self.crash_seq:
            self.crash_seq = None
            raise Evicted("after the hook, before the ack")

    def teardown(self) -> None:
        self.fail_seq = None
        self.crash_seq = None
        for _ in range(3):
            self._wave()
        try:
            current = read_state(self.rig.storage)
            assert current.recovery_event_ack == current.recovery_event_seq
            assert sorted(set(self.delivered)) == list(range(1, current.recovery_event_seq + 1))
        finally:
            self.rig.storage.close()
            self.dir.cleanup()

    def _wave(self) -> None:
        queue = self.rig.sched.due_queue
        lane = queue.get(RECOVERY_EVENTS)
        if lane is None or lane.due_at is None:
            return
        claimed = queue.claim(lane, self.clock.now_ms())
        assert claimed is not None
        try:
            result = asyncio.run(self.rig.events.run_lane(self.clock.now_ms(), 10**15))
        except HostFailure:
            return
        except Evicted:
            self.evict()
            return
        assert result is None
        queue.complete(claimed, None)
        self.rig.sched.alarm.decide(self.clock.now_ms())

    @rule(thread=THREADS, failure=st.sampled_from(["a", "b"]), recipients=SUBMISSIONS)
    def record(self, thread: str, failure: str, recipients: list[str]) -> None:
        self.rig.faults.record(thread, failure=failure, error_type="E", recipients=recipients)

    @rule(thread=THREADS, recipients=SUBMISSIONS)
    def note(self, thread: str, recipients: list[str]) -> None:
        self.rig.faults.note_recipients(thread, recipients)

    @rule(thread=THREADS)
    def clear(self, thread: str) -> None:
        self.rig.faults.clear(thread)

    @rule(thread=THREADS, submission=st.sampled_from(["s1", "s2", "s3", "s4"]))
    def park(self, thread: str, submission: str) -> None:
        self.rig.bindings.park(thread, submission, "absent")

    @rule(fail=st.integers(0, 3), crash=st.integers(0, 3))
    def deliver(self, fail: int, crash: int) -> None:
        ack = read_state(self.rig.storage).recovery_event_ack
        self.fail_seq = ack + fail if fail else None
        self.crash_seq = ack + crash if crash else None
        self._wave()
        self.fail_seq = None
        self.crash_seq = None

    @rule(ms=st.integers(0, 120_000))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def evict(self) -> None:
        self.rig.storage.close()
        self.rig = self._start()

    @invariant()
    def pending_events_have_their_lane_due_and_an_alarm(self) -> None:
        assert pending_events_are_due(self.rig)

    @invariant()
    def first_deliveries_are_in_order_and_acks_follow_deliveries(self) -> None:
        first = list(dict.fromkeys(self.delivered))
        assert first == list(range(1, len(first) + 1))
        current = read_state(self.rig.storage)
        assert current.recovery_event_ack <= len(first)
        assert len(first) <= current.recovery_event_seq


EventLog.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEventLog = EventLog.TestCase
