"""Binding waits: parked once, reported once, dormant across eviction until the registry changes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from faults_support import Recorder, Rig, alarm_covers_due_lanes, build, end_pass

from threadline.clock import ManualClock
from threadline.maintenance import bindings as bindings_module
from threadline.scheduling import NATIVE, read_state
from threadline.scheduling import state as gen
from threadline.storage import SqliteStorage

KEY_1 = "registry-key-one"
KEY_2 = "registry-key-two"


def _submission(storage: SqliteStorage, sid: str, seq: int, state: str = "queued") -> None:
    storage.exec(
        "INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t1', 0, 0) "
        "ON CONFLICT DO NOTHING"
    )
    settled = state == "settled"
    storage.exec(
        "INSERT INTO tl_submissions (id, thread_id, seq, agent, input_json, input_digest, state,"
        " outcome, created_at, updated_at, settled_at) VALUES (?, 't1', ?, 'gone', '{}', 'd', ?,"
        " ?, 0, 0, ?)",
        sid, seq, state, "aborted" if settled else None, 0 if settled else None,
    )


@pytest.fixture
def rig(storage: SqliteStorage, clock: ManualClock) -> Rig:
    return build(storage, clock)


def test_park_is_reported_once_across_eviction(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "object.db"
    first = build(SqliteStorage(path), clock)
    assert first.bindings.park("t1", "s1", "summarizer") is True
    assert len(first.logs) == 1 and "summarizer" in first.logs[0]
    assert first.bindings.park("t1", "s1", "summarizer") is False
    assert len(first.logs) == 1
    first.storage.close()

    for _ in range(2):  # evicted twice: still parked, never reported again
        clock.advance(60_000)
        again = build(SqliteStorage(path), clock)
        assert again.bindings.parked_threads() == {"t1"}
        assert again.bindings.park("t1", "s1", "summarizer") is False
        assert again.logs == []
        events = again.events.unacknowledged()
        assert [(e.kind, e.submission_id, e.agent) for e in events] == [
            ("parked", "s1", "summarizer")
        ]
        again.storage.close()


def test_parked_event_reaches_the_hook(storage: SqliteStorage, clock: ManualClock) -> None:
    hook = Recorder()
    rig = build(storage, clock, hook)
    rig.bindings.park("t1", "s1", "summarizer")
    assert asyncio.run(rig.events.run_lane(clock.now_ms(), 10**15)) is None
    [event] = hook.seen
    assert (event.seq, event.kind, event.thread_id, event.submission_id, event.agent) == (
        1, "parked", "t1", "s1", "summarizer",
    )
    assert event.fault is None and event.at == clock.now_ms()


def test_a_parked_head_creates_no_native_work(rig: Rig) -> None:
    rig.bindings.reconcile(KEY_1)
    end_pass(rig, acknowledge=True)
    before = read_state(rig.storage)
    rig.bindings.park("t1", "s1", "summarizer")
    after = read_state(rig.storage)
    assert (after.dirty, after.processed) == (before.dirty, before.processed)
    native = rig.sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at is None
    # Only the report is due; once delivered, nothing keeps the alarm armed.
    end_pass(rig, acknowledge=True)
    assert rig.storage.known_alarm() is None
    assert rig.bindings.parked_threads() == {"t1"}


def test_registry_key_change_creates_exactly_one_native_opportunity(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "object.db"
    rig = build(SqliteStorage(path), clock)
    rig.bindings.reconcile(KEY_1)
    rig.bindings.park("t1", "s1", "summarizer")
    rig.bindings.park("t2", "s2", "translator")
    end_pass(rig, acknowledge=True)
    rig.storage.close()

    # Same deployment after eviction: one row read, nothing written, still dormant.
    rig = build(SqliteStorage(path), clock)
    meter = rig.storage.meter.reading()
    assert rig.bindings.reconcile(KEY_1) is False
    spent = rig.storage.meter.reading() - meter
    assert (spent.statements, spent.rows_read, spent.rows_written, spent.alarm_writes) == (
        1, 1, 0, 0,
    )
    assert rig.bindings.parked_threads() == {"t1", "t2"}
    assert rig.storage.known_alarm() is None

    # A new deployment: waits gone, one generation, native due now with an alarm.
    clock.advance(5_000)
    before = read_state(rig.storage)
    assert rig.bindings.reconcile(KEY_2) is True
    after = read_state(rig.storage)
    assert after.dirty == before.dirty + 1
    assert after.binding_registry_key == KEY_2
    assert rig.bindings.parked_threads() == frozenset()
    native = rig.sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at == clock.now_ms()
    assert alarm_covers_due_lanes(rig) and rig.storage.known_alarm() is not None

    # Repeating it, in this or a later incarnation, creates nothing more.
    assert rig.bindings.reconcile(KEY_2) is False
    rig.storage.close()
    rig = build(SqliteStorage(path), clock)
    assert rig.bindings.reconcile(KEY_2) is False
    assert read_state(rig.storage).dirty == after.dirty
    rig.storage.close()


def test_registry_key_change_drops_a_pending_native_retry(rig: Rig) -> None:
    rig.bindings.reconcile(KEY_1)
    current = read_state(rig.storage)
    gen.set_retry(
        rig.storage, gen.NativeRetry(current.dirty, rig.clock.now_ms() + 60_000, True, 4)
    )
    assert rig.bindings.reconcile(KEY_2) is True
    assert read_state(rig.storage).pending_retry is None
    native = rig.sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at == rig.clock.now_ms()


def test_release_and_prune_forget_waits(rig: Rig) -> None:
    _submission(rig.storage, "s1", 1)
    _submission(rig.storage, "s2", 2)
    _submission(rig.storage, "s3", 3, state="settled")
    for sid in ("s1", "s2", "s3"):
        rig.bindings.park("t1", sid, "gone")
    rig.bindings.park("t9", "missing", "gone")  # no such submission any more
    assert rig.bindings.prune() == 2
    assert [w[1] for w in rig.bindings.waits()] == ["s1", "s2"]
    assert rig.bindings.release("s1") is True
    assert rig.bindings.release("s1") is False
    assert [w[1] for w in rig.bindings.waits()] == ["s2"]
    assert rig.bindings.prune() == 0


def test_a_stale_registry_read_loses_the_compare_and_set(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.bindings.reconcile(KEY_1)
    stale = read_state(rig.storage)
    assert rig.bindings.reconcile(KEY_2) is True
    rig.bindings.park("t1", "s1", "summarizer")
    dirty = read_state(rig.storage).dirty
    # A duplicate that read the record before KEY_2 was stored must change nothing.
    monkeypatch.setattr(bindings_module.state, "read_state", lambda storage: stale)
    assert rig.bindings.reconcile(KEY_2) is False
    monkeypatch.undo()
    assert read_state(rig.storage).dirty == dirty
    assert rig.bindings.parked_threads() == {"t1"}


def test_reconcile_with_the_key_the_pass_already_read_reads_nothing(rig: Rig) -> None:
    rig.bindings.reconcile(KEY_1)
    stored = read_state(rig.storage).binding_registry_key
    meter = rig.storage.meter.reading()
    assert rig.bindings.reconcile(KEY_1, stored=stored) is False
    assert (rig.storage.meter.reading() - meter).statements == 0
    # A stale stored key only costs the compare-and-set, which then finds nothing to do.
    assert rig.bindings.reconcile(KEY_1, stored=None) is False
    assert rig.bindings.reconcile(KEY_2, stored=stored) is True
