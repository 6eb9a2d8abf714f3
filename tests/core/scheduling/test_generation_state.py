from __future__ import annotations

import pytest

from threadline.clock import ManualClock
from threadline.errors import SchedulingError, StorageError
from threadline.scheduling import NATIVE, NativeRetry, Scheduler, read_state
from threadline.scheduling import state as st
from threadline.storage import SqliteStorage


def test_new_object_starts_dirty(storage: SqliteStorage) -> None:
    state = read_state(storage)
    assert (state.dirty, state.processed, state.nonterminal, state.retry) == (1, 0, 0, None)
    st.ensure_state(storage)  # existing record kept
    assert read_state(storage) == state


def test_missing_record_is_an_error(storage: SqliteStorage) -> None:
    storage.exec("DELETE FROM tl_maintenance")
    with pytest.raises(SchedulingError):
        read_state(storage)
    st.ensure_state(storage)
    assert (read_state(storage).dirty, read_state(storage).processed) == (1, 0)


def test_acknowledge_is_forward_only_and_bounded_by_dirty(storage: SqliteStorage) -> None:
    st.bump_dirty(storage)
    assert read_state(storage).dirty == 2
    assert st.acknowledge(storage, 1)
    assert not st.acknowledge(storage, 1)
    assert not st.acknowledge(storage, 3)  # beyond dirty
    assert st.acknowledge(storage, 2)
    assert not st.acknowledge(storage, 1)
    assert read_state(storage).processed == 2


def test_retry_record_and_obsolescence(storage: SqliteStorage) -> None:
    st.set_retry(storage, NativeRetry(generation=1, not_before=99, native_only=True, stalls=45))
    state = read_state(storage)
    assert state.retry == NativeRetry(1, 99, True, 30)
    assert state.pending_retry == state.retry
    st.bump_dirty(storage)
    assert read_state(storage).pending_retry is None  # a newer generation obsoletes it
    st.bump_dirty(storage, clear_retry=True)
    assert read_state(storage).retry is None
    st.set_retry(storage, NativeRetry(3, 5, False, 0))
    st.clear_retry(storage)
    assert read_state(storage).retry is None


def test_cursors_nonterminal_and_registry_key(storage: SqliteStorage) -> None:
    st.set_cursor(storage, "last_served_thread", "t1")
    st.set_cursor(storage, "last_recovered_thread", "t2")
    st.set_cursor(storage, "last_after_native_lane", "lane")
    st.set_nonterminal(storage, 4)
    with pytest.raises(SchedulingError):
        st.set_cursor(storage, "processed", "x")
    assert st.set_binding_registry_key(storage, "k1")
    assert not st.set_binding_registry_key(storage, "k1")
    assert st.set_binding_registry_key(storage, "k2")
    state = read_state(storage)
    assert (state.last_served_thread, state.last_recovered_thread,
            state.last_after_native_lane, state.nonterminal, state.binding_registry_key) == (
        "t1", "t2", "lane", 4, "k2")


def test_recovery_events_are_acknowledged_in_order_once(storage: SqliteStorage) -> None:
    assert st.append_recovery_events(storage, 2) == 2
    assert read_state(storage).recovery_events_pending
    assert not st.acknowledge_recovery_event(storage, 2)  # out of order
    assert st.acknowledge_recovery_event(storage, 1)
    assert not st.acknowledge_recovery_event(storage, 1)
    assert st.acknowledge_recovery_event(storage, 2)
    assert not st.acknowledge_recovery_event(storage, 3)  # not appended yet
    assert not read_state(storage).recovery_events_pending
    with pytest.raises(SchedulingError):
        st.append_recovery_events(storage, -1)


def test_processed_never_exceeds_dirty_in_sql(storage: SqliteStorage) -> None:
    with pytest.raises(StorageError):
        storage.exec("UPDATE tl_maintenance SET processed = dirty + 1")


def test_caught_up_is_one_row_plus_the_native_lane(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    now = clock.now_ms()
    state = read_state(storage)
    assert not state.caught_up(None, now)  # a new object is dirty
    st.acknowledge(storage, state.dirty)
    assert read_state(storage).caught_up(None, now)
    sched.due_queue.enroll(NATIVE, now + 10)  # e.g. a timer on the native lane
    native = sched.due_queue.get(NATIVE)
    assert read_state(storage).caught_up(native, now)
    assert not read_state(storage).caught_up(native, now + 10)
    st.set_retry(storage, NativeRetry(state.dirty, now + 10, True, 1))
    assert read_state(storage).caught_up(None, now)  # processed: a retry changes nothing


def test_caught_up_while_a_native_retry_is_in_the_future(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    # A pass fired for another lane must not re-run a failing generation before its backoff.
    now = clock.now_ms()
    state = read_state(storage)
    st.set_retry(storage, NativeRetry(state.dirty, now + 10, True, 1))
    sched.due_queue.checkpoint_native(now + 10)
    native = sched.due_queue.get(NATIVE)
    assert read_state(storage).caught_up(native, now)
    assert read_state(storage).caught_up(native, now + 9)
    assert not read_state(storage).caught_up(native, now + 10)
    assert not read_state(storage).caught_up(None, now + 10)
    st.bump_dirty(storage)
    assert read_state(storage).pending_retry is None


def test_bump_dirty_keeps_the_obsolete_retry_row_unless_asked(storage: SqliteStorage) -> None:
    generation = read_state(storage).dirty
    st.set_retry(storage, NativeRetry(generation, 5_000, False, 0))
    assert read_state(storage).retry == NativeRetry(generation, 5_000, False, 0)
    st.bump_dirty(storage)
    # A newer generation makes the retry obsolete without touching its row...
    after = read_state(storage)
    assert after.retry is not None and after.pending_retry is None
    # ...and clearing it drops the row.
    st.bump_dirty(storage, clear_retry=True)
    assert read_state(storage).retry is None


def test_appending_no_recovery_events_is_allowed(storage: SqliteStorage) -> None:
    before = read_state(storage).recovery_event_seq
    assert st.append_recovery_events(storage, 0) == before
    with pytest.raises(SchedulingError, match="negative"):
        st.append_recovery_events(storage, -1)


def test_end_retry_drops_a_retry_unless_it_still_defers_owed_native_work(
    storage: SqliteStorage,
) -> None:
    dirty = read_state(storage).dirty  # not processed: native work is owed
    found = NativeRetry(dirty, 5_000, True, 3)
    st.set_retry(storage, found)
    assert read_state(storage).retry_defers(4_999)
    assert not st.end_retry(storage, 4_999, found)  # still deferring it: kept
    assert read_state(storage).retry is not None
    assert st.end_retry(storage, 5_000, found)  # its time has come
    assert read_state(storage).retry is None
    assert not st.end_retry(storage, 5_000, found)  # nothing left: no write
    # Processed, or obsoleted by a newer generation: it defers nothing, so it ends.
    found = NativeRetry(dirty, 5_000, False, 2)
    st.set_retry(storage, found)
    assert st.acknowledge(storage, dirty)
    assert not read_state(storage).retry_defers(0)
    assert st.end_retry(storage, 0, found)
    found = NativeRetry(dirty, 5_000, True, 2)
    st.set_retry(storage, found)
    st.bump_dirty(storage)
    assert not read_state(storage).retry_defers(0)
    assert st.end_retry(storage, 0, found)


def test_end_retry_keeps_a_retry_recorded_after_the_one_found(storage: SqliteStorage) -> None:
    dirty = read_state(storage).dirty
    found = NativeRetry(dirty, 5_000, True, 3)
    st.set_retry(storage, found)
    # The pass's own checkpoint backs the work off once more; its time passes too.
    st.set_retry(storage, NativeRetry(dirty, 9_000, True, 4))
    assert not st.end_retry(storage, 10_000, found)
    assert read_state(storage).retry == NativeRetry(dirty, 9_000, True, 4)
    # Any difference in what was found keeps it too.
    for other in (NativeRetry(dirty, 9_000, False, 4), NativeRetry(dirty, 9_000, True, 3),
                  NativeRetry(dirty + 1, 9_000, True, 4), NativeRetry(dirty, 8_999, True, 4)):
        assert not st.end_retry(storage, 10_000, other)
    assert st.end_retry(storage, 10_000, NativeRetry(dirty, 9_000, True, 4))
