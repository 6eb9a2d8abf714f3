"""The alarm invariant for recovery faults, events and binding waits, at every crash point.

Each transition is run against an object that is caught up (lanes idle, slot empty) and
evicted before each of its statements in turn; the object is then rebuilt from the same file
(without the start-up ``ensure_alarm``, which must not be needed) and checked: an appended,
unacknowledged event has its lane due with an alarm, and a fault has the native lane due by
its ``retry_at``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from faults_support import (
    CrashingStorage,
    Rig,
    alarm_covers_due_lanes,
    build,
    end_pass,
    pending_events_are_due,
)

from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.scheduling import NATIVE
from threadline.storage import SqliteStorage

Step = Callable[[Rig], object]


def _record(rig: Rig) -> object:
    return rig.faults.record("t1", failure="x", error_type="E", recipients=["s1", "s2"])


def _record_changed(rig: Rig) -> object:
    return rig.faults.record("t1", failure="other", error_type="E", recipients=["s3"])


def _note(rig: Rig) -> object:
    return rig.faults.note_recipients("t1", ["s4"])


def _clear(rig: Rig) -> object:
    return rig.faults.clear("t1")


def _park(rig: Rig) -> object:
    return rig.bindings.park("t2", "s7", "missing-agent")


# (setup steps, the transition under test)
CASES: dict[str, tuple[tuple[Step, ...], Step]] = {
    "record-new": ((), _record),
    "record-changed": ((_record,), _record_changed),
    "note-recipients": ((_record,), _note),
    "clear": ((_record,), _clear),
    "park": ((), _park),
}


def _check(rig: Rig) -> None:
    assert pending_events_are_due(rig)
    assert alarm_covers_due_lanes(rig)
    for fault in rig.faults.all():
        native = rig.sched.due_queue.get(NATIVE)
        assert native is not None and native.due_at is not None
        assert native.due_at <= fault.retry_at


def _statements(path: Path, clock: ManualClock, setup: tuple[Step, ...], step: Step) -> int:
    storage = CrashingStorage(path)
    rig = build(storage, clock)
    for prepare in setup:
        prepare(rig)
    end_pass(rig)
    before = storage.statements
    step(rig)
    count = storage.statements - before
    _check(rig)
    storage.close()
    return count


@pytest.mark.parametrize("case", sorted(CASES))
def test_appended_event_always_has_its_lane_due_and_an_alarm(
    case: str, tmp_path: Path
) -> None:
    setup, step = CASES[case]
    total = _statements(tmp_path / "count.db", ManualClock(), setup, step)
    assert total > 0
    for crash in range(1, total + 1):
        path = tmp_path / f"crash-{crash}.db"
        clock = ManualClock()
        storage = CrashingStorage(path)
        rig = build(storage, clock)
        for prepare in setup:
            prepare(rig)
        end_pass(rig)
        storage.crash_at = storage.statements + crash
        with pytest.raises(Evicted):
            step(rig)
        storage.close()
        reopened = build(SqliteStorage(path), clock)
        _check(reopened)
        reopened.storage.close()
