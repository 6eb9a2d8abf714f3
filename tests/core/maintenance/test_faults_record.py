"""The durable recovery-fault record: attempts, retry deadline, skipping, recipients."""

from __future__ import annotations

import pytest
from faults_support import Rig, alarm_covers_due_lanes, build

from threadline.clock import ManualClock
from threadline.maintenance.faults import (
    FAULT_RETRY_CAP_MS,
    MAX_FAILURE_CHARS,
    MAX_FAULT_ATTEMPTS,
    fault_retry_delay_ms,
)
from threadline.scheduling import NATIVE, read_state
from threadline.storage import SqliteStorage
from threadline.threads.recovery import RecoveryBlocked, RecoverySweepResult


@pytest.fixture
def rig(storage: SqliteStorage, clock: ManualClock) -> Rig:
    return build(storage, clock)


def _delay(rig: Rig) -> int:
    fault = rig.faults.record(
        "t1", failure="cannot decode journal", error_type="StorageError", recipients=("s1",)
    )
    return fault.retry_at - rig.clock.now_ms()


def test_fault_attempts_saturate_at_2_pow_31_minus_1(rig: Rig) -> None:
    rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    rig.storage.exec(
        "UPDATE tl_recovery_faults SET attempts = ? WHERE thread_id = 't1'", MAX_FAULT_ATTEMPTS - 1
    )
    assert rig.faults.record("t1", failure="x", error_type="E").attempts == MAX_FAULT_ATTEMPTS
    again = rig.faults.record("t1", failure="x", error_type="E")
    assert again.attempts == MAX_FAULT_ATTEMPTS == 2**31 - 1
    # The saturated fault still backs off at the cap.
    assert again.retry_at - rig.clock.now_ms() == FAULT_RETRY_CAP_MS


def test_fault_retry_at_is_now_plus_min_60s_and_5s_times_2_pow_attempts(rig: Rig) -> None:
    delays = []
    for _ in range(7):
        delays.append(_delay(rig))
        rig.clock.advance(1_234)
    assert delays == [5_000, 10_000, 20_000, 40_000, 60_000, 60_000, 60_000]
    assert [fault_retry_delay_ms(n) for n in (0, 1, 3, 4, 30, 10**9)] == [
        5_000, 10_000, 40_000, 60_000, 60_000, 60_000,
    ]


def test_fault_keeps_first_failed_at_and_moves_last_failed_at(rig: Rig) -> None:
    start = rig.clock.now_ms()
    rig.faults.record("t1", failure="a", error_type="E", recipients=["s1"])
    rig.clock.advance(7_000)
    fault = rig.faults.record("t1", failure="b", error_type="E", recipients=["s1", "s2"])
    assert (fault.first_failed_at, fault.last_failed_at) == (start, start + 7_000)
    assert fault.attempts == 2
    assert fault.recipients == ("s1", "s2")
    assert rig.faults.get("t1") == fault
    assert rig.faults.all() == [fault]


def test_faulted_thread_is_skipped_until_retry_at(rig: Rig) -> None:
    fault = rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    assert rig.faults.skipped(rig.clock.now_ms()) == {"t1"}
    assert rig.faults.skipped(fault.retry_at - 1) == {"t1"}
    assert rig.faults.skipped(fault.retry_at) == frozenset()
    assert rig.faults.next_retry_at() == fault.retry_at


def test_fault_enrolls_native_lane_by_retry_at_with_an_alarm(rig: Rig) -> None:
    rig.sched.gate.ensure_alarm()
    rig.sched.due_queue.checkpoint_native(None)  # a caught-up object: native lane idle
    rig.storage.delete_alarm()
    fault = rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    native = rig.sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at == fault.retry_at
    assert alarm_covers_due_lanes(rig)


def test_other_threads_are_unaffected_by_a_fault(rig: Rig) -> None:
    before = read_state(rig.storage).dirty
    first = rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    rig.clock.advance(2_000)
    rig.faults.record("t2", failure="y", error_type="E", recipients=["s9"])
    rig.faults.record("t2", failure="y", error_type="E")
    # t1's record is exactly as it was; t3 never appears.
    assert rig.faults.get("t1") == first
    assert rig.faults.get("t3") is None
    assert rig.faults.skipped(first.retry_at) == {"t2"}
    # A fault is not new native work: the generation does not move.
    assert read_state(rig.storage).dirty == before
    assert rig.faults.clear("t2") is True
    assert rig.faults.get("t1") == first
    assert rig.faults.skipped(rig.clock.now_ms()) == {"t1"}


def test_clear_removes_the_fault_and_clearing_twice_changes_nothing(rig: Rig) -> None:
    rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    assert rig.faults.clear("t1") is True
    assert rig.faults.get("t1") is None
    assert rig.faults.next_retry_at() is None
    writes = rig.storage.meter.rows_written
    assert rig.faults.clear("t1") is False
    assert rig.storage.meter.rows_written == writes
    count = rig.storage.exec("SELECT count(*) FROM tl_recovery_recipients").scalar()
    assert count == 0


def test_failure_text_is_bounded_and_always_storable(rig: Rig) -> None:
    fault = rig.faults.record("t1", failure="bad \udcff" + "x" * 5_000, error_type="E")
    assert len(fault.failure) == MAX_FAILURE_CHARS
    assert "\udcff" not in fault.failure
    assert rig.faults.get("t1") == fault


def test_recipients_reject_a_bare_string(rig: Rig) -> None:
    with pytest.raises(TypeError):
        rig.faults.record("t1", failure="x", error_type="E", recipients="s1")
    assert rig.faults.get("t1") is None


def test_observe_records_a_blocked_recovery_and_clears_a_healthy_one(rig: Rig) -> None:
    blocked = RecoverySweepResult(
        blocked=(RecoveryBlocked("t1", "journal row undecodable", "ValueError"),)
    )
    fault = rig.faults.observe("t1", blocked, recipients=["s1"])
    assert fault is not None and (fault.failure, fault.error_type) == (
        "journal row undecodable", "ValueError",
    )
    assert rig.faults.deadlines() == {"t1": fault.retry_at}
    # Another Thread's blocked entry is not this Thread's failure.
    assert rig.faults.observe("t2", blocked, faulted=False) is None
    assert rig.faults.get("t2") is None
    assert rig.faults.observe("t1", RecoverySweepResult()) is None
    assert rig.faults.deadlines() == {}
    assert [e.kind for e in rig.events.unacknowledged()] == ["created", "cleared"]
