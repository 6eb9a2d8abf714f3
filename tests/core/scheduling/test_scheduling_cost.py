"""Storage cost of the producer path and of ``next()``, from the meter.

``SqliteStorage``'s meter is approximate (an upsert counts as one row written and none read;
index updates are not counted), so these pin the statement shape, not billed figures.
"""

from __future__ import annotations

from collections.abc import Callable

from threadline.clock import ManualClock
from threadline.scheduling import NATIVE, Scheduler
from threadline.storage import MeterReading, SqliteStorage


def _cost(storage: SqliteStorage, fn: Callable[[], object]) -> MeterReading:
    before = storage.meter.reading()
    fn()
    return storage.meter.reading() - before


def _shape(cost: MeterReading) -> tuple[int, int, int, int]:
    return cost.statements, cost.rows_read, cost.rows_written, cost.alarm_writes


def test_mutate_one_host_lane(sched: Scheduler, storage: SqliteStorage) -> None:
    def one() -> None:
        sched.gate.mutate(lambda: None, lanes=["mail"], invalidates_recovery=False)

    # Enroll (upsert, one row written) + next() (one indexed row read) + the alarm write.
    assert _shape(_cost(storage, one)) == (2, 1, 1, 1)
    # Later mutations keep the earlier alarm: no slot write.
    assert _shape(_cost(storage, one)) == (2, 1, 1, 0)


def test_mutate_native(sched: Scheduler, storage: SqliteStorage) -> None:
    def native() -> None:
        sched.gate.mutate(lambda: None)

    # Enroll native + bump the generation row (read 1, written 1) + next().
    assert _shape(_cost(storage, native)) == (3, 2, 2, 1)
    # Native is already due now: its enrollment writes nothing; mail's and the generation do.
    assert _shape(_cost(storage, lambda: sched.gate.mutate(lambda: None, lanes=["mail"]))) == (
        4, 2, 2, 0)


def test_mutate_without_work_costs_nothing(sched: Scheduler, storage: SqliteStorage) -> None:
    assert _shape(_cost(storage, lambda: sched.gate.mutate(
        lambda: None, invalidates_recovery=False))) == (0, 0, 0, 0)


def test_next_is_one_row(sched: Scheduler, storage: SqliteStorage) -> None:
    for index in range(50):
        sched.due_queue.enroll(f"lane-{index}", 1_000 + index)
    assert _shape(_cost(storage, sched.due_queue.next)) == (1, 1, 0, 0)


def test_native_enrollment_that_would_not_move_it_earlier_writes_nothing(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    queue = sched.due_queue
    storage.transaction(lambda: queue.enroll(NATIVE, 5_000))
    native = queue.get(NATIVE)
    assert native is not None
    # Later than (or at) its deadline: no row written, the revision kept.
    assert _shape(_cost(storage, lambda: queue.enroll(NATIVE, 9_000))) == (1, 0, 0, 0)
    assert _shape(_cost(storage, lambda: queue.enroll(NATIVE, 5_000))) == (1, 0, 0, 0)
    assert queue.get(NATIVE) == native
    # Earlier: written, as any enrollment.
    assert _shape(_cost(storage, lambda: queue.enroll(NATIVE, 4_000))) == (1, 0, 1, 0)
    moved = queue.get(NATIVE)
    assert moved is not None and moved.due_at == 4_000 and moved.revision == native.revision + 1
    # A host lane is a wave's fence: the same enrollment still bumps its revision.
    storage.transaction(lambda: queue.enroll("mail", 5_000))
    assert _shape(_cost(storage, lambda: queue.enroll("mail", 9_000))) == (1, 0, 1, 0)


def test_native_progress_inside_the_pass_writes_no_lane_and_arms_an_empty_slot_once(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    fallback = clock.now_ms() + 5_000
    storage.transaction(lambda: sched.due_queue.checkpoint_native(fallback))
    storage.delete_alarm()  # the platform empties the slot when the alarm fires
    native = sched.due_queue.get(NATIVE)

    def progress() -> None:
        with sched.gate.native_source():
            storage.transaction(lambda: sched.gate.record_progress([NATIVE]))

    # The empty slot gets the crash fallback: clear_retry (one read) + next() + the alarm.
    assert _shape(_cost(storage, progress)) == (2, 1, 0, 1)
    assert storage.known_alarm() == fallback
    # Armed: more progress of the pass's own costs the retry check alone.
    assert _shape(_cost(storage, progress)) == (1, 0, 0, 0)
    assert sched.due_queue.get(NATIVE) == native


def test_the_pass_arms_its_crash_fallback_without_reading_the_queue(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    fallback = clock.now_ms() + 5_000
    storage.transaction(lambda: sched.due_queue.checkpoint_native(fallback))
    storage.delete_alarm()  # the platform empties the slot when the alarm fires

    def progress() -> None:
        with sched.gate.native_source(crash_fallback=fallback):
            storage.transaction(lambda: sched.gate.record_progress([NATIVE]))

    def lease() -> None:
        with sched.gate.native_source(crash_fallback=fallback):
            sched.gate.schedule(NATIVE, clock.now_ms() + 60_000)

    # clear_retry (one read) and the alarm at the fallback; no next().
    assert _shape(_cost(storage, progress)) == (1, 0, 0, 1)
    assert storage.known_alarm() == fallback
    # A claim's lease deadline later than the fallback: no statement at all.
    assert _shape(_cost(storage, lease)) == (0, 0, 0, 0)
    # Earlier than the fallback (a short lease): enrolled as anywhere else.
    def short_lease() -> None:
        with sched.gate.native_source(crash_fallback=fallback):
            sched.gate.schedule(NATIVE, fallback - 1_000)

    assert _shape(_cost(storage, short_lease))[2] == 1
    moved = sched.due_queue.get(NATIVE)
    assert moved is not None and moved.due_at == fallback - 1_000
    # Outside the pass the same enrollment still ensures the alarm from the queue.
    assert _shape(_cost(storage, lambda: sched.gate.schedule(
        NATIVE, clock.now_ms() + 60_000))) == (2, 1, 0, 0)


def test_checkpointing_the_native_lane_is_one_statement(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    queue = sched.due_queue
    due = clock.now_ms() + 5_000
    # A missing row is registered, then set.
    storage.transaction(lambda: queue.checkpoint_native(due))
    native = queue.get(NATIVE)
    assert native is not None and native.due_at == due
    assert _shape(_cost(storage, lambda: queue.checkpoint_native(due + 1))) == (1, 1, 1, 0)
    assert _shape(_cost(storage, lambda: queue.checkpoint_native(None))) == (1, 1, 1, 0)
    idle = queue.get(NATIVE)
    assert idle is not None and idle.due_at is None
    # Already as asked: nothing written (the registration check is the second statement).
    assert _shape(_cost(storage, lambda: queue.checkpoint_native(None))) == (2, 0, 0, 0)
    storage.transaction(lambda: queue.checkpoint_native(due))
    assert _shape(_cost(storage, lambda: queue.checkpoint_native(due))) == (2, 0, 0, 0)


def test_acknowledging_and_counting_is_one_compare_and_set(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    from threadline.scheduling import read_state, state

    storage.transaction(lambda: state.bump_dirty(storage))
    dirty = read_state(storage).dirty
    assert _shape(_cost(storage, lambda: state.acknowledge_counting(storage, dirty, 3))) == (
        1, 1, 1, 0)
    assert (read_state(storage).processed, read_state(storage).nonterminal) == (dirty, 3)
    # Again, or an older generation: nothing written, nothing moves back.
    assert _shape(_cost(storage, lambda: state.acknowledge_counting(storage, dirty, 3))) == (
        1, 0, 0, 0)
    state.acknowledge_counting(storage, dirty - 1, 3)
    assert read_state(storage).processed == dirty
    # Beyond dirty: only the count moves.
    state.acknowledge_counting(storage, dirty + 5, 0)
    assert (read_state(storage).processed, read_state(storage).nonterminal) == (dirty, 0)


def test_native_progress_of_a_pass_that_saw_no_retry_reads_nothing(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    fallback = clock.now_ms() + 5_000
    storage.transaction(lambda: sched.due_queue.checkpoint_native(fallback))

    def progress(recorded: bool) -> None:
        with sched.gate.native_source(crash_fallback=fallback, retry_recorded=recorded):
            storage.transaction(lambda: sched.gate.record_progress([NATIVE]))

    assert storage.known_alarm() is None
    assert _shape(_cost(storage, lambda: progress(False))) == (0, 0, 0, 1)
    assert _shape(_cost(storage, lambda: progress(False))) == (0, 0, 0, 0)
    assert _shape(_cost(storage, lambda: progress(True))) == (1, 0, 0, 0)


def test_native_progress_on_a_lane_already_due_writes_nothing(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    queue = sched.due_queue
    now = clock.now_ms()
    storage.transaction(lambda: queue.enroll(NATIVE, now, progress=True))
    native = queue.get(NATIVE)
    # A burst of admissions: the second and later ones find the lane due, budget full.
    assert _shape(_cost(storage, lambda: queue.enroll(NATIVE, now, progress=True))) == (
        1, 0, 0, 0)
    assert queue.get(NATIVE) == native
    # A charged lane is replenished: written.
    storage.exec("UPDATE tl_lanes SET stalls = 2 WHERE id = ?", NATIVE)
    assert _shape(_cost(storage, lambda: queue.enroll(NATIVE, now, progress=True)))[2] == 1
    replenished = queue.get(NATIVE)
    assert replenished is not None and replenished.stalls == 0


def test_progress_arms_the_alarm_without_reading_the_queue(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    # Progress makes its lane due now: the alarm bound is now + min_delay, no next() needed.
    def admit() -> None:
        storage.transaction(lambda: sched.gate.record_progress([NATIVE]))

    # Enroll native + bump the generation (read 1, written 1) + the alarm write.
    assert _shape(_cost(storage, admit)) == (2, 1, 2, 1)
    assert storage.known_alarm() == clock.now_ms() + sched.config.min_alarm_delay_ms
    # The lane already due: only the generation moves; the alarm stays.
    assert _shape(_cost(storage, admit)) == (2, 1, 1, 0)


def test_native_progress_that_ends_the_pass_retry_makes_the_lane_due_now(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    from threadline.scheduling import NativeRetry, read_state, state

    # A pass began under a retry with 3 stalls: its crash fallback is that backoff ahead.
    storage.transaction(lambda: state.bump_dirty(storage))
    dirty = read_state(storage).dirty
    storage.transaction(lambda: state.set_retry(
        storage, NativeRetry(dirty, clock.now_ms(), True, 3)))
    fallback = clock.now_ms() + 8_000
    storage.transaction(lambda: sched.due_queue.checkpoint_native(fallback))
    storage.delete_alarm()  # the platform empties the slot when the alarm fires
    clock.advance(1_200)

    def progress() -> None:
        with sched.gate.native_source(crash_fallback=fallback, retry_recorded=True):
            storage.transaction(lambda: sched.gate.record_progress([NATIVE]))

    # Dropping the retry (one row) ends the backoff: the lane is due now (one row) and the
    # alarm is at now + min_delay, not at the fallback; no queue read, no generation.
    assert _shape(_cost(storage, progress)) == (2, 1, 2, 1)
    now = clock.now_ms()
    assert storage.known_alarm() == now + sched.config.min_alarm_delay_ms
    lane = sched.due_queue.get(NATIVE)
    assert lane is not None and lane.due_at == now
    after = read_state(storage)
    assert after.retry is None and after.dirty == dirty
    # The retry is gone: later progress of the same pass costs the retry check alone.
    clock.advance(300)
    assert _shape(_cost(storage, progress)) == (1, 0, 0, 0)
    assert sched.due_queue.get(NATIVE) == lane
    assert storage.known_alarm() == now + sched.config.min_alarm_delay_ms


def test_the_pass_leaves_the_alarm_alone_when_its_deadline_would_not_move_the_native_lane(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    fallback = clock.now_ms() + 5_000
    sooner = fallback - 2_000
    # The native lane already due sooner than the pass's fallback, the slot emptied by the
    # platform when the alarm fired.
    storage.transaction(lambda: sched.due_queue.checkpoint_native(sooner))
    storage.delete_alarm()

    def lease(due_at: int) -> None:
        with sched.gate.native_source(crash_fallback=fallback):
            sched.gate.schedule(NATIVE, due_at)

    # A deadline at exactly the fallback changes nothing: no statement.
    storage.set_alarm(fallback)
    assert _shape(_cost(storage, lambda: lease(fallback))) == (0, 0, 0, 0)
    storage.delete_alarm()
    # A deadline before the fallback but after the lane's: the enrollment writes nothing and
    # the empty slot gets the fallback, without reading the queue.
    assert _shape(_cost(storage, lambda: lease(fallback - 1_000))) == (1, 0, 0, 1)
    assert storage.known_alarm() == fallback
    # Armed: the same deadline again costs the enrollment's statement alone.
    assert _shape(_cost(storage, lambda: lease(fallback - 1_000))) == (1, 0, 0, 0)
    native = sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at == sooner
