"""Random interleavings of producers, maintenance waves and evictions keep the alarm invariant.

One SQLite database survives the whole run, like an object's storage; every in-memory part
(due queue, alarm service, gate, running mutations and waves) is dropped on eviction and rebuilt
from the same storage, followed by the start-up ``ensure_alarm``.

The storage's ``known_alarm()`` behaves like ``CloudflareStorage``'s: a cache of the last value
written or read, rolled back with a failed transaction, unknown to a fresh incarnation until it
reads the slot, and NOT emptied when the platform fires the alarm. The platform firing and the
handler running are separate steps, so producers also run against that stale cache.

After every step: if any lane is due, the slot (the platform's, not the cache) is set no later
than ``max(earliest due, now + min_delay)`` or a fired alarm's handler is still to run; if none
is due, the slot is empty (nothing stale forces work); and a generation that is not processed
always has its native lane due. Evictions are checked at the eviction point too, before the
restart's ``ensure_alarm()`` could repair anything; one eviction point is the instant a
producer's transaction commits, so an alarm written after the commit is caught.

Profiles: CI runs the derandomized ``alarm-ci`` profile (200 examples, the same every run). To
search further, run the randomized profile, which draws new examples every run and prints a
blob to reproduce a failure::

    THREADLINE_ALARM_PROFILE=alarm-random [THREADLINE_ALARM_EXAMPLES=5000] \
        bash scripts/test tests/core/scheduling/test_alarm_invariant.py

Mutation runs use ``THREADLINE_ALARM_PROFILE=alarm-mutation`` (fewer examples, no shrinking).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import Evicted
from threadline.scheduling import (
    NATIVE,
    PUBLICATION,
    Lane,
    Scheduler,
    backoff_ms,
    build_scheduler,
)
from threadline.scheduling import state as gen
from threadline.storage import SqliteStorage, migrate

T = TypeVar("T")
LANES = ("alpha", "beta.sync", PUBLICATION)
lane_sets = st.lists(st.sampled_from(LANES), max_size=2, unique=True)
#: How often the rules reached states that are easy to miss; see the last test.
REACHED: Counter[str] = Counter()
#: Not a failpoint: the instant the producer's outermost transaction commits.
COMMIT = "commit"


class Boom(Exception):
    pass


class CachedSlotStorage(SqliteStorage):
    """SQLite whose ``known_alarm()`` is a cache kept by the rules of ``CloudflareStorage``."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.cache: int | None = None
        self.lose_at_commit = False

    def slot(self) -> int | None:
        """The platform's slot (the truth the invariant is about)."""
        return super().known_alarm()

    def known_alarm(self) -> int | None:
        return self.cache

    async def get_alarm(self) -> int | None:
        self.cache = self.slot()
        return self.cache

    def set_alarm(self, epoch_ms: int) -> None:
        super().set_alarm(epoch_ms)
        self.cache = int(epoch_ms)

    def delete_alarm(self) -> None:
        super().delete_alarm()
        self.cache = None

    def transaction(self, fn: Callable[[], T]) -> T:
        saved = self.cache
        outermost = not self.in_transaction()
        try:
            result = super().transaction(fn)
        except BaseException:
            self.cache = saved
            raise
        if outermost and self.lose_at_commit:
            # The object is lost the instant this commit lands: nothing after it runs.
            self.lose_at_commit = False
            raise Evicted(COMMIT)
        return result

    def take_due_alarm(self, now_ms: int) -> int | None:
        """The platform fires: the slot empties, the cache does not notice."""
        due = self.slot()
        if due is None or due > now_ms:
            return None
        self._raw("DELETE FROM tl_platform_alarm WHERE id = 1")
        return due


@dataclass
class AsyncProducer:
    task: asyncio.Task[None]
    release: asyncio.Event
    recovery: bool
    entered: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Wave:
    lane: Lane
    generation: int
    active_at_claim: int


class AlarmInvariant(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = RuntimeConfig(
            alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=60_000, park_after_stalls=2
        )
        self.clock = ManualClock(start_ms=1_000_000)
        self.storage = CachedSlotStorage()
        migrate(self.storage)
        self.loop = asyncio.new_event_loop()
        self.producers: list[AsyncProducer] = []
        self.waves: dict[str, Wave] = {}
        self.pass_scope: Any = None
        self.incarnation = 0
        self.rng = random.Random(0)
        # Producer enrollments not yet served by an idle completion: lane -> revision.
        self.seen: dict[str, int] = {}
        self.obligations: dict[str, int] = {}
        # The platform emptied the slot to run the handler, which has not run yet.
        self.handler_pending = False
        # Lanes as a wave read them earlier (claims may act on such stale snapshots).
        self.snapshots: dict[str, Lane] = {}
        # Parked lanes reported and still parked: reporting one again is a duplicate.
        self.reported: set[str] = set()
        self.evictions_checked = 0
        self.sched = self._start()

    def _start(self) -> Scheduler:
        self.incarnation += 1
        # A fresh incarnation knows nothing of the slot until it reads it (as Space.start does).
        self.storage.cache = None
        self.loop.run_until_complete(self.storage.get_alarm())
        sched = build_scheduler(
            self.storage, self.clock, self.config, random.Random(self.incarnation)
        )
        sched.gate.ensure_alarm()
        return sched

    def teardown(self) -> None:
        self._drop_in_memory()
        self.loop.close()
        self.storage.close()

    # -- helpers ---------------------------------------------------------------------------

    def _drop_in_memory(self) -> None:
        for producer in self.producers:
            producer.task.cancel()
        if self.producers:
            self.loop.run_until_complete(
                asyncio.gather(*(p.task for p in self.producers), return_exceptions=True)
            )
        self.producers.clear()
        self.waves.clear()
        self.snapshots.clear()
        self.pass_scope = None

    def _spin(self, until: Any) -> None:
        for _ in range(50):
            if until():
                return
            self.loop.run_until_complete(asyncio.sleep(0))

    def _fact(self, progress: bool) -> None:
        self.storage.exec("INSERT INTO facts (v) VALUES (1)")
        if progress:
            self.sched.gate.record_progress([])

    def _observe_producers(self) -> None:
        # Only a producer enrollment bumps a revision; claims and completions never do.
        for lane in self.sched.due_queue.lanes():
            if lane.revision > self.seen.get(lane.id, 0):
                self.obligations[lane.id] = lane.revision
            self.seen[lane.id] = lane.revision

    def _begin_pass(self) -> None:
        if self.pass_scope is None:
            self.pass_scope = self.sched.alarm.wakes_deferred()
            self.pass_scope.__enter__()

    def _end_pass_if_idle(self) -> None:
        if not self.waves and self.pass_scope is not None:
            self.pass_scope.__exit__(None, None, None)
            self.pass_scope = None

    def _claim(self, lane: Lane) -> None:
        now = self.clock.now_ms()
        generation = gen.read_state(self.storage).dirty
        active = self.sched.gate.active

        def charge() -> Lane | None:
            charged = self.sched.due_queue.claim(lane, now)
            self.sched.alarm.decide(now)
            return charged

        charged = self.storage.transaction(charge)
        if charged is not None:
            self.waves[lane.id] = Wave(charged, generation, active)

    def _complete(self, wave: Wave, outcome: str, delay: int) -> None:
        self._observe_producers()
        now = self.clock.now_ms()
        lane = wave.lane
        with self.sched.gate.snapshot() as active:
            # A producer between prearm and release may still commit for this lane.
            if lane.id in self.sched.gate.active_lanes():
                return
            if outcome == "idle":
                next_due = None
            elif outcome == "more":
                next_due = now + delay
            else:
                next_due = now + backoff_ms(lane.stalls, self.config, self.rng)

            def checkpoint() -> None:
                done = self.sched.due_queue.complete(lane, next_due)
                if done and next_due is None and self.obligations.get(lane.id, 0) <= lane.revision:
                    self.obligations.pop(lane.id, None)
                if done and lane.id == NATIVE and next_due is None:
                    # Certify only a generation no mutation overlapped; otherwise the pass
                    # keeps native work due, as its final decision does.
                    if active == 0 and wave.active_at_claim == 0:
                        gen.acknowledge(self.storage, wave.generation)
                    state = gen.read_state(self.storage)
                    if state.dirty > state.processed:
                        self.sched.due_queue.checkpoint_native(
                            now + self.config.min_alarm_delay_ms
                        )
                self.sched.alarm.decide(now)

            self.storage.transaction(checkpoint)

    # -- rules -----------------------------------------------------------------------------

    @initialize()
    def facts_table(self) -> None:
        self.storage.exec("CREATE TABLE IF NOT EXISTS facts (v INTEGER)")

    @rule(ms=st.integers(0, 5_000))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(lanes=lane_sets, recovery=st.booleans(), progress=st.booleans(), fail=st.booleans())
    def mutate(self, lanes: list[str], recovery: bool, progress: bool, fail: bool) -> None:
        def body() -> None:
            self._fact(progress)
            if fail:
                raise Boom

        with contextlib.suppress(Boom):
            self.sched.gate.mutate(body, lanes=lanes, invalidates_recovery=recovery)

    @rule(
        lanes=lane_sets,
        recovery=st.booleans(),
        where=st.sampled_from([COMMIT, "maintenance:dirty:before", "maintenance:dirty:after"]),
    )
    def mutate_evicted(self, lanes: list[str], recovery: bool, where: str) -> None:
        self._arm_eviction(where)
        try:
            self.sched.gate.mutate(lambda: self._fact(True), lanes=lanes,
                                   invalidates_recovery=recovery)
        except Evicted:
            self._evict()
        else:  # pragma: no cover - the failpoint always fires
            raise AssertionError("failpoint did not fire")

    @precondition(lambda self: len(self.producers) < 3)
    @rule(lanes=lane_sets, recovery=st.booleans(), progress=st.booleans(),
          fail=st.sampled_from(["no", "before-commit", "after-commit"]))
    def begin_mutation(self, lanes: list[str], recovery: bool, progress: bool, fail: str) -> None:
        release = asyncio.Event()
        gate = self.sched.gate
        entered = asyncio.Event()

        async def producer() -> None:
            async with gate.mutation(lanes=lanes, invalidates_recovery=recovery):
                entered.set()
                await release.wait()
                if fail == "before-commit":
                    raise Boom
                self.storage.transaction(lambda: self._fact(progress))
                if fail == "after-commit":
                    raise Boom

        task = self.loop.create_task(producer())
        self.producers.append(AsyncProducer(task, release, recovery, entered))
        self._spin(lambda: entered.is_set() or task.done())

    @rule(
        lanes=lane_sets,
        recovery=st.booleans(),
        where=st.sampled_from([
            COMMIT,
            "maintenance:dirty:before",
            "maintenance:dirty:after",
            "maintenance:mutation:armed",
            "maintenance:mutation:finished",
        ]),
    )
    def mutation_evicted(self, lanes: list[str], recovery: bool, where: str) -> None:
        self._arm_eviction(where)
        gate = self.sched.gate

        async def producer() -> None:
            async with gate.mutation(lanes=lanes, invalidates_recovery=recovery):
                self.storage.transaction(lambda: self._fact(True))

        task = self.loop.create_task(producer())
        self.loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        assert isinstance(task.exception(), Evicted)
        self._evict()

    @precondition(lambda self: bool(self.producers))
    @rule(data=st.data())
    def finish_mutation(self, data: st.DataObject) -> None:
        producer = self.producers.pop(data.draw(st.integers(0, len(self.producers) - 1)))
        producer.release.set()
        self.loop.run_until_complete(asyncio.gather(producer.task, return_exceptions=True))

    @rule(lane=st.sampled_from((*LANES, NATIVE)), delay=st.integers(-1_000, 120_000),
          cursor=st.none() | st.integers(0, 6))
    def schedule(self, lane: str, delay: int, cursor: int | None) -> None:
        self.sched.gate.schedule(lane, self.clock.now_ms() + delay, cursor)

    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        due = [lane for lane in self.sched.due_queue.due(self.clock.now_ms(), 20)
               if lane.id not in self.waves]
        if not due:
            return
        self._begin_pass()
        self._claim(data.draw(st.sampled_from(due)))
        self._end_pass_if_idle()

    @rule()
    def wave_reads_the_queue(self) -> None:
        self.snapshots = {lane.id: lane for lane in self.sched.due_queue.due(
            self.clock.now_ms(), 20)}

    @precondition(lambda self: bool(self.snapshots))
    @rule(data=st.data())
    def claim_an_earlier_read(self, data: st.DataObject) -> None:
        lane_id = data.draw(st.sampled_from(sorted(self.snapshots)))
        lane = self.snapshots.pop(lane_id)
        if lane_id in self.waves:
            return
        self._begin_pass()
        self._claim(lane)
        self._end_pass_if_idle()

    @rule()
    def report_parked(self) -> None:
        for lane in self.storage.transaction(self.sched.due_queue.take_parked_reports):
            assert lane.id not in self.reported, f"parking of {lane.id} reported twice"
            self.reported.add(lane.id)
            REACHED["parked lane reported"] += 1

    @rule(lane_id=st.sampled_from(LANES))
    def waves_stall_until_parked(self, lane_id: str) -> None:
        """Claim a lane in waves that never make progress until it parks."""
        if lane_id in self.waves:
            return
        self.sched.gate.schedule(lane_id, self.clock.now_ms())
        for _ in range(self.config.park_after_stalls + 1):
            lane = self.sched.due_queue.get(lane_id)
            if lane is None or lane.due_at is None or lane.state == "parked":
                break
            self.clock.set(max(self.clock.now_ms(), lane.due_at))
            self._begin_pass()
            self._claim(lane)
            wave = self.waves.pop(lane_id, None)
            if wave is not None:
                self._complete(wave, "fail", 0)
            self._end_pass_if_idle()
        lane = self.sched.due_queue.get(lane_id)
        if lane is not None and lane.state == "parked":
            REACHED["lane parked"] += 1

    @precondition(lambda self: bool(self.waves))
    @rule(data=st.data(), outcome=st.sampled_from(["idle", "more", "fail"]),
          delay=st.integers(0, 10_000))
    def complete(self, data: st.DataObject, outcome: str, delay: int) -> None:
        lane_id = data.draw(st.sampled_from(sorted(self.waves)))
        self._complete(self.waves.pop(lane_id), outcome, delay)
        self._end_pass_if_idle()

    @rule()
    def schedule_now(self) -> None:
        before = self.storage.meter.reading()
        slot = self.storage.slot()
        self.sched.alarm.schedule_now()
        if self.pass_scope is not None:
            assert self.storage.meter.reading() == before
            assert self.storage.slot() == slot

    @precondition(lambda self: not self.handler_pending)
    @rule()
    def platform_fires(self) -> None:
        slot = self.storage.slot()
        if slot is None:
            return
        self.clock.set(max(self.clock.now_ms(), slot))
        assert self.storage.take_due_alarm(self.clock.now_ms()) == slot
        self.handler_pending = True

    @precondition(lambda self: self.handler_pending and not self.waves)
    @rule()
    def handler_runs(self) -> None:
        # Space.alarm: learn the slot (emptied by the firing, unless a producer armed it since),
        # then run the pass.
        self.loop.run_until_complete(self.storage.get_alarm())
        self.handler_pending = False
        self._begin_pass()
        for lane in self.sched.due_queue.due(self.clock.now_ms(), 50):
            self._claim(lane)
        for lane_id in sorted(self.waves):
            self._complete(self.waves.pop(lane_id), "idle", 0)
        self.sched.alarm.decide()
        self._end_pass_if_idle()

    @rule()
    def evict(self) -> None:
        self._evict()

    def _arm_eviction(self, where: str) -> None:
        if where == COMMIT:
            self.storage.lose_at_commit = True
        else:
            self.sched.failpoints.evict_at(where)

    def _evict(self) -> None:
        self.storage.lose_at_commit = False
        # At the eviction point, before the restart's ensure_alarm() could repair anything:
        # what is committed must already be covered by the slot.
        self._check_alarm_covers_due_work()
        self.evictions_checked += 1
        self._drop_in_memory()
        self.sched = self._start()

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def alarm_covers_due_work(self) -> None:
        self._check_alarm_covers_due_work()

    def _check_alarm_covers_due_work(self) -> None:
        earliest = self.sched.due_queue.next()
        slot = self.storage.slot()
        if self.handler_pending:
            # A fired alarm whose handler is still to run covers everything; nothing else
            # may have armed the slot meanwhile except a producer.
            assert slot is None or earliest is not None
            return
        if earliest is not None:
            bound = max(earliest, self.clock.now_ms() + self.config.min_alarm_delay_ms)
            assert slot is not None, "due work without an alarm"
            assert slot <= bound, f"alarm {slot} later than {bound}"
        else:
            assert slot is None, "a stale alarm would force an empty pass"

    @invariant()
    def producer_work_stays_due_until_served(self) -> None:
        self._observe_producers()
        for lane_id in self.obligations:
            lane = self.sched.due_queue.get(lane_id)
            assert lane is not None and lane.due_at is not None, f"{lane_id} work was dropped"

    @invariant()
    def no_acknowledgement_while_a_mutation_is_in_flight(self) -> None:
        in_flight = [p for p in self.producers
                     if p.recovery and p.entered.is_set() and not p.task.done()]
        if in_flight:
            state = gen.read_state(self.storage)
            assert state.dirty > state.processed, "acknowledged under a mutation in flight"

    @invariant()
    def dirty_generation_keeps_native_due(self) -> None:
        state = gen.read_state(self.storage)
        if state.dirty > state.processed:
            native = self.sched.due_queue.get(NATIVE)
            assert native is not None and native.due_at is not None

    @invariant()
    def lanes_are_consistent(self) -> None:
        for lane in self.sched.due_queue.lanes():
            if lane.state != "parked":
                self.reported.discard(lane.id)
            if lane.stalls >= self.config.park_after_stalls:
                assert lane.state == "parked"
            if lane.state == "parked":
                assert lane.due_at is not None and lane.due_at >= lane.not_before


settings.register_profile(
    "alarm-ci",
    max_examples=200,
    stateful_step_count=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "alarm-random",
    max_examples=int(os.environ.get("THREADLINE_ALARM_EXAMPLES", "2000")),
    stateful_step_count=50,
    derandomize=False,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# Mutation runs execute the suite once per mutant: fewer examples and no shrinking, since only
# "did it fail" matters there.
settings.register_profile(
    "alarm-mutation",
    settings.get_profile("alarm-ci"),
    max_examples=60,
    phases=[Phase.explicit, Phase.generate],
)
AlarmInvariant.TestCase.settings = settings.get_profile(
    os.environ.get("THREADLINE_ALARM_PROFILE", "alarm-ci")
)
TestAlarmInvariant = AlarmInvariant.TestCase


def test_the_machine_parks_a_lane_and_reports_it() -> None:
    """The parked-lane rules are not vacuous: a short run parks a lane and reports it."""
    REACHED.clear()
    run_state_machine_as_test(
        AlarmInvariant,
        settings=settings(settings.get_profile("alarm-ci"), max_examples=25),
    )
    assert REACHED["lane parked"] > 0, REACHED
    assert REACHED["parked lane reported"] > 0, REACHED
