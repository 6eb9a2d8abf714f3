"""What the fault, binding-wait and pass-report records carry, field by field.

The end-to-end tests check that these records exist and drive the pass; these check that each
field survives its round trip through storage and the event log unchanged, and that the
transitions a host only hears about never count as new native work.
"""

from __future__ import annotations

import asyncio

import pytest
from faults_support import Rig, build

from threadline.clock import ManualClock
from threadline.maintenance.faults import EventDraft, append_events
from threadline.maintenance.report import (
    KEPT_REPORTS,
    MAX_FAILURE_CHARS,
    PassPhase,
    PassReport,
    PassReports,
    failure_fields,
)
from threadline.scheduling import NATIVE, AlarmDecision, read_state
from threadline.storage import SqliteStorage


@pytest.fixture
def rig(storage: SqliteStorage, clock: ManualClock) -> Rig:
    return build(storage, clock)


def _native_due(rig: Rig) -> int | None:
    lane = rig.sched.due_queue.get(NATIVE)
    return None if lane is None else lane.due_at


def test_binding_waits_list_thread_submission_agent_and_time(rig: Rig) -> None:
    parked_at = rig.clock.now_ms()
    assert rig.bindings.park("thread-a", "sub-1", "writer")
    rig.clock.advance(10)
    assert rig.bindings.park("thread-b", "sub-2", "critic")
    assert rig.bindings.waits() == [
        ("thread-a", "sub-1", "writer", parked_at),
        ("thread-b", "sub-2", "critic", parked_at + 10),
    ]


def test_recipients_noted_under_a_fault_hear_of_the_whole_fault(rig: Rig) -> None:
    rig.faults.record("t1", failure="journal unreadable", error_type="StorageError",
                      recipients=["s1"])
    rig.faults.note_recipients("t1", ["s2"])
    stored = rig.faults.get("t1")
    assert stored is not None and stored.recipients == ("s1", "s2")
    created = rig.events.unacknowledged()[-1]
    assert (created.kind, created.submission_id) == ("created", "s2")
    # The event carries the fault as it stands with the new recipient, not a partial copy.
    assert created.fault == stored


def test_fault_transitions_are_not_new_native_work(rig: Rig) -> None:
    """Recording, widening and clearing a fault only tells the host: the generation (which
    says "new native work") does not move, and only ``record`` puts native due, at retry."""
    fault = rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    dirty = read_state(rig.storage).dirty
    assert _native_due(rig) == fault.retry_at
    assert rig.faults.note_recipients("t1", ["s2"]) == ("s2",)
    assert read_state(rig.storage).dirty == dirty
    assert _native_due(rig) == fault.retry_at
    assert rig.faults.clear("t1")
    assert read_state(rig.storage).dirty == dirty
    assert _native_due(rig) == fault.retry_at


def test_parking_a_head_is_not_new_native_work(rig: Rig) -> None:
    dirty = read_state(rig.storage).dirty
    assert rig.bindings.park("t1", "s1", "gone")
    assert read_state(rig.storage).dirty == dirty
    assert _native_due(rig) is None


def test_stored_pass_report_round_trips_every_field(storage: SqliteStorage) -> None:
    reports = PassReports(storage)
    full = PassReport(
        started_at=1_000, phase=PassPhase.FAILED, recovered=2, settled=3, dispatched=4,
        nonterminal=5, alarm=AlarmDecision.REARMED, alarm_at=9_000, rows_read=6,
        rows_written=7, statements=8, duration_ms=11, failure_type="StorageError",
        failure_message="disk full",
    )
    bare = PassReport(started_at=2_000, phase=PassPhase.FAILED, failure_type="Boom")
    reports.keep(full)
    reports.keep(bare)
    assert reports.stored() == [bare, full]
    assert bare.alarm is None and bare.alarm_at is None


def test_a_caught_up_report_is_counted_not_stored(storage: SqliteStorage) -> None:
    reports = PassReports(storage)
    reports.keep(PassReport(started_at=1, phase=PassPhase.CAUGHT_UP))
    assert reports.caught_up == 1 and len(reports.recent) == 1
    assert reports.stored() == []


def test_failure_fields_keep_a_message_that_is_not_valid_utf8() -> None:
    fields = failure_fields(ValueError("bad \ud800 byte"))
    assert fields == {"failure_type": "ValueError", "failure_message": "bad \\ud800 byte"}
    fields["failure_message"].encode("utf-8")  # storable as text


def test_failure_fields_cut_a_long_message() -> None:
    fields = failure_fields(RuntimeError("x" * (MAX_FAILURE_CHARS + 10)))
    assert fields["failure_message"] == "x" * MAX_FAILURE_CHARS


def test_reports_are_kept_to_the_last_fifty_durably_and_in_memory(
    storage: SqliteStorage,
) -> None:
    reports = PassReports(storage)
    for started in range(KEPT_REPORTS + 3):
        reports.keep(PassReport(started_at=started, phase=PassPhase.FAILED, failure_type="E"))
    stored = reports.stored(limit=KEPT_REPORTS + 10)
    assert [r.started_at for r in stored] == list(range(KEPT_REPORTS + 2, 2, -1))
    assert [r.started_at for r in reports.recent] == list(range(3, KEPT_REPORTS + 3))
    assert reports.listed(limit=KEPT_REPORTS + 10) == list(reversed(reports.recent))


def test_only_a_failed_report_is_stored(storage: SqliteStorage) -> None:
    reports = PassReports(storage)
    before = storage.meter.reading()
    reports.keep(PassReport(started_at=1, phase=PassPhase.ACTIONABLE))
    assert (storage.meter.reading() - before).statements == 0  # not a row written or read
    reports.keep(PassReport(started_at=2, phase=PassPhase.FAILED, failure_type="E"))
    assert [r.started_at for r in reports.stored()] == [2]
    assert [r.started_at for r in reports.listed()] == [2, 1]
    # A later incarnation lists what was stored, and its own passes before it.
    later = PassReports(storage)
    assert [r.started_at for r in later.listed()] == [2]
    later.keep(PassReport(started_at=3, phase=PassPhase.ACTIONABLE))
    later.keep(PassReport(started_at=4, phase=PassPhase.CAUGHT_UP))
    later.keep(PassReport(started_at=5, phase=PassPhase.FAILED, failure_type="E"))
    assert [r.started_at for r in later.listed()] == [5, 3, 2]
    assert [r.started_at for r in later.listed(limit=2)] == [5, 3]


def test_a_fault_without_recipients_is_listed_and_cleared_with_its_record(rig: Rig) -> None:
    fault = rig.faults.record("t1", failure="x", error_type="E")
    assert rig.faults.all() == [fault] and fault.recipients == ()
    assert rig.faults.clear("t1")
    cleared = rig.events.unacknowledged()[-1]
    assert (cleared.kind, cleared.submission_id, cleared.fault) == ("cleared", None, fault)


def test_created_events_carry_the_fault_as_recorded(rig: Rig) -> None:
    with_recipient = rig.faults.record("t1", failure="x", error_type="E" * 300,
                                       recipients=["s1"])
    thread_level = rig.faults.record("t2", failure="y", error_type="F")
    assert with_recipient.error_type == "E" * 200  # the type is cut, whatever an error says
    events = rig.events.unacknowledged()
    assert [(e.kind, e.thread_id, e.submission_id, e.agent) for e in events] == [
        ("created", "t1", "s1", None), ("created", "t2", None, None),
    ]
    assert [e.fault for e in events] == [with_recipient, thread_level]


def test_event_delivery_stops_when_the_clock_reaches_the_deadline(rig: Rig) -> None:
    rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    now = rig.clock.now_ms()
    assert asyncio.run(rig.events.run_lane(now, now)) == now  # still due, nothing delivered
    assert [e.seq for e in rig.events.unacknowledged()] == [1]


def test_append_events_returns_the_sequence_numbers_it_reserved(rig: Rig) -> None:
    drafts = [EventDraft("parked", "t1", None, "s1", "gone"),
              EventDraft("parked", "t2", None, "s2", "gone")]
    first = rig.storage.transaction(
        lambda: append_events(rig.storage, rig.sched.gate, rig.clock, drafts))
    second = rig.storage.transaction(
        lambda: append_events(rig.storage, rig.sched.gate, rig.clock, drafts[:1]))
    assert (first, second) == ([1, 2], [3])
    assert [e.seq for e in rig.events.unacknowledged()] == [1, 2, 3]
