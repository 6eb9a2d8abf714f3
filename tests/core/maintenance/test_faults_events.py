"""Recovery events: a monotonic sequence, delivered in order, acknowledged one by one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from faults_support import Recorder, Rig, build

import threadline
from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.maintenance.faults import RecoveryEvent
from threadline.scheduling import read_state
from threadline.storage import SqliteStorage

FAR = 10**15


@pytest.fixture
def rig(storage: SqliteStorage, clock: ManualClock) -> Rig:
    return build(storage, clock)


def _kinds(events: list[RecoveryEvent]) -> list[tuple[int, str, str | None]]:
    return [(e.seq, e.kind, e.submission_id) for e in events]


def _three_faults(rig: Rig) -> None:
    rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    rig.faults.record("t2", failure="y", error_type="E", recipients=["s2"])
    rig.faults.record("t3", failure="z", error_type="E", recipients=["s3"])


def test_created_changed_cleared_events_get_a_monotonic_sequence(rig: Rig) -> None:
    rig.faults.record("t1", failure="journal unreadable", error_type="StorageError",
                      recipients=["s1"])
    rig.clock.advance(5_000)
    # Same failure, a newly affected submission: only its `created`.
    rig.faults.record("t1", failure="journal unreadable", error_type="StorageError",
                      recipients=["s1", "s2"])
    # Same failure again, nothing new: a retry is not a transition.
    rig.faults.record("t1", failure="journal unreadable", error_type="StorageError",
                      recipients=["s2"])
    # Another failure: `changed` for every recipient.
    rig.faults.record("t1", failure="history undecodable", error_type="ValueError")
    rig.faults.clear("t1")
    events = rig.events.unacknowledged()
    assert _kinds(events) == [
        (1, "created", "s1"),
        (2, "created", "s2"),
        (3, "changed", "s1"),
        (4, "changed", "s2"),
        (5, "cleared", "s1"),
        (6, "cleared", "s2"),
    ]
    assert read_state(rig.storage).recovery_event_seq == 6
    assert all(e.thread_id == "t1" for e in events)
    changed = events[2].fault
    assert changed is not None and changed.failure == "history undecodable"
    assert changed.attempts == 4 and changed.recipients == ("s1", "s2")
    # A cleared event carries the last fault it clears.
    cleared = events[5].fault
    assert cleared is not None and cleared.failure == "history undecodable"
    # Sequence numbers keep growing after the log was drained.
    asyncio.run(rig.events.run_lane(rig.clock.now_ms(), FAR))
    rig.faults.record("t1", failure="again", error_type="E", recipients=["s3"])
    assert _kinds(rig.events.unacknowledged()) == [(7, "created", "s3")]


def test_a_new_fault_without_recipients_still_reports_created(rig: Rig) -> None:
    rig.faults.record("t1", failure="x", error_type="E")
    rig.faults.clear("t1")
    assert _kinds(rig.events.unacknowledged()) == [(1, "created", None), (2, "cleared", None)]


def test_admissions_under_a_fault_become_recipients_without_speeding_up_retry(rig: Rig) -> None:
    fault = rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    rig.clock.advance(1_000)
    assert rig.faults.note_recipients("t1", ["s1", "s2", "s3"]) == ("s2", "s3")
    assert rig.faults.note_recipients("t1", ["s2"]) == ()
    assert rig.faults.note_recipients("t9", ["s9"]) == ()
    after = rig.faults.get("t1")
    assert after is not None and after.retry_at == fault.retry_at
    assert after.attempts == 1 and after.recipients == ("s1", "s2", "s3")
    assert _kinds(rig.events.unacknowledged()) == [
        (1, "created", "s1"), (2, "created", "s2"), (3, "created", "s3"),
    ]
    # The events of admitted recipients carry the fault as it stands after their admission.
    noted = rig.events.unacknowledged()[1:]
    assert [e.fault for e in noted] == [after, after]


def test_events_are_delivered_in_order_and_acknowledged_one_by_one(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    acks_seen: list[int] = []

    def hook(event: RecoveryEvent) -> None:
        # Every earlier event is acknowledged before the next one is delivered.
        acks_seen.append(read_state(storage).recovery_event_ack)
        delivered.append(event.seq)

    delivered: list[int] = []
    rig = build(storage, clock, hook)
    _three_faults(rig)
    assert rig.events.pending()
    assert asyncio.run(rig.events.run_lane(clock.now_ms(), FAR)) is None
    assert delivered == [1, 2, 3]
    assert acks_seen == [0, 1, 2]
    assert not rig.events.pending()
    assert storage.exec("SELECT count(*) FROM tl_recovery_events").scalar() == 0
    # Nothing left: a second wave delivers nothing.
    assert asyncio.run(rig.events.run_lane(clock.now_ms(), FAR)) is None
    assert delivered == [1, 2, 3]


def test_crash_between_hook_and_ack_redelivers_the_event(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "object.db"
    first = Recorder()

    async def crash_after_delivery(event: RecoveryEvent) -> None:
        await first(event)
        if event.seq == 2:
            raise Evicted("after hook, before ack")

    rig = build(SqliteStorage(path), clock, crash_after_delivery)
    _three_faults(rig)
    with pytest.raises(Evicted):
        asyncio.run(rig.events.run_lane(clock.now_ms(), FAR))
    rig.storage.close()

    second = Recorder()
    again = build(SqliteStorage(path), clock, second)
    assert read_state(again.storage).recovery_event_ack == 1
    assert asyncio.run(again.events.run_lane(clock.now_ms(), FAR)) is None
    assert [e.seq for e in first.seen] == [1, 2]
    assert [e.seq for e in second.seen] == [2, 3]
    # The redelivered event is the same event, sequence and all.
    assert second.seen[0] == first.seen[1]
    again.storage.close()


def test_raising_hook_is_retried_and_leaves_later_events_undelivered(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    hook = Recorder()
    hook.fail_on = {2}
    rig = build(storage, clock, hook)
    _three_faults(rig)
    with pytest.raises(RuntimeError, match="refused event 2"):
        asyncio.run(rig.events.run_lane(clock.now_ms(), FAR))
    assert [e.seq for e in hook.seen] == [1, 2]
    assert [e.seq for e in rig.events.unacknowledged()] == [2, 3]
    # Still failing: the retry stops at the same event again.
    with pytest.raises(RuntimeError):
        asyncio.run(rig.events.run_lane(clock.now_ms(), FAR))
    assert [e.seq for e in hook.seen] == [1, 2, 2]
    hook.fail_on.clear()
    assert asyncio.run(rig.events.run_lane(clock.now_ms(), FAR)) is None
    assert [e.seq for e in hook.seen] == [1, 2, 2, 2, 3]
    assert not rig.events.pending()


def test_delivery_stops_at_the_deadline_and_stays_due(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    delivered: list[int] = []

    def slow(event: RecoveryEvent) -> None:
        delivered.append(event.seq)
        clock.advance(10_000)

    rig = build(storage, clock, slow)
    _three_faults(rig)
    start = clock.now_ms()
    assert asyncio.run(rig.events.run_lane(start, start + 15_000)) == start + 20_000
    assert delivered == [1, 2]
    assert read_state(storage).recovery_event_ack == 2


def test_events_appended_during_delivery_are_delivered_in_the_same_wave(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    delivered: list[int] = []
    rig: Rig

    def hook(event: RecoveryEvent) -> None:
        delivered.append(event.seq)
        if event.seq == 1:
            rig.faults.record("t9", failure="late", error_type="E", recipients=["s9"])

    rig = build(storage, clock, hook)
    rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    assert asyncio.run(rig.events.run_lane(clock.now_ms(), FAR)) is None
    assert delivered == [1, 2]


def test_without_a_hook_events_are_logged_and_acknowledged(rig: Rig) -> None:
    _three_faults(rig)
    logged = len(rig.logs)
    assert asyncio.run(rig.events.run_lane(rig.clock.now_ms(), FAR)) is None
    assert not rig.events.pending()
    assert len(rig.logs) == logged + 3
    assert all("acknowledged without a hook" in line for line in rig.logs[logged:])


def test_a_new_fault_is_logged_once_without_its_failure_text(rig: Rig) -> None:
    rig.faults.record("t1", failure="secret payload", error_type="ValueError", recipients=["s"])
    rig.faults.record("t1", failure="secret payload", error_type="ValueError")
    rig.faults.record("t1", failure="other", error_type="ValueError")
    assert len(rig.logs) == 1
    assert "t1" in rig.logs[0] and "ValueError" in rig.logs[0]
    assert "secret" not in rig.logs[0]


def test_app_registers_one_recovery_event_hook(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    app = threadline.Application()
    received: list[threadline.RecoveryEvent] = []

    @app.on_recovery_event
    async def notify(event: threadline.RecoveryEvent) -> None:
        received.append(event)

    assert app.recovery_event_hook is notify
    with pytest.raises(ValueError, match="already registered"):
        app.on_recovery_event(notify)
    rig = build(storage, clock, app.recovery_event_hook)
    rig.faults.record("t1", failure="x", error_type="E", recipients=["s1"])
    asyncio.run(rig.events.run_lane(clock.now_ms(), FAR))
    assert [(e.seq, e.kind) for e in received] == [(1, "created")]
