"""The generation record: the one ``tl_maintenance`` row.

``dirty`` counts mutations that may create native work; ``processed`` is the newest generation
a pass certified as handled. ``processed >= dirty`` with no pending native retry and an idle
native lane means the object is caught up, which a pass learns from this one row. A new object
starts at ``dirty=1, processed=0`` so its first pass classifies whatever already exists.

Every writer is a single statement, safe inside the caller's transaction; the compare-and-set
ones say in their docstring why repeating them changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadline.errors import SchedulingError
from threadline.scheduling.due_queue import Lane
from threadline.storage.port import Storage

#: A native retry's stall count saturates here (the backoff exponent cap).
MAX_RETRY_STALLS = 30

_SELECT = """
SELECT dirty, processed, nonterminal, last_served_thread, last_recovered_thread,
    last_after_native_lane, binding_registry_key, retry_generation, retry_not_before,
    retry_native_only, retry_stalls, recovery_event_seq, recovery_event_ack, lanes_key,
    space_name
FROM tl_maintenance WHERE id = 1
"""
_ENSURE = """
INSERT INTO tl_maintenance (id, dirty, processed) VALUES (1, 1, 0) ON CONFLICT DO NOTHING
"""
_BUMP_DIRTY = "UPDATE tl_maintenance SET dirty = dirty + 1 WHERE id = 1"
_BUMP_DIRTY_CLEAR_RETRY = """
UPDATE tl_maintenance SET dirty = dirty + 1, retry_generation = NULL, retry_not_before = NULL,
    retry_native_only = NULL, retry_stalls = NULL
WHERE id = 1
"""
_ACKNOWLEDGE = """
UPDATE tl_maintenance SET processed = ? WHERE id = 1 AND processed < ? AND dirty >= ?
"""
_SET_NONTERMINAL = "UPDATE tl_maintenance SET nonterminal = ? WHERE id = 1 AND nonterminal <> ?"
# acknowledge and set_nonterminal in one statement (a checkpoint does both).
_ACKNOWLEDGE_COUNTING = """
UPDATE tl_maintenance SET nonterminal = ?,
    processed = CASE WHEN processed < ? AND dirty >= ? THEN ? ELSE processed END
WHERE id = 1 AND ((processed < ? AND dirty >= ?) OR nonterminal <> ?)
"""
_SET_RETRY = """
UPDATE tl_maintenance SET retry_generation = ?, retry_not_before = ?, retry_native_only = ?,
    retry_stalls = ?
WHERE id = 1
"""
_CLEAR_RETRY = """
UPDATE tl_maintenance SET retry_generation = NULL, retry_not_before = NULL,
    retry_native_only = NULL, retry_stalls = NULL
WHERE id = 1 AND retry_generation IS NOT NULL
"""
# The retry a pass found at its begin, if it is still the one recorded (a retry the pass
# wrote since is kept), ends once it no longer defers owed native work (its generation is
# processed or obsolete, or its time has come); one still deferring it is kept.
_END_RETRY = """
UPDATE tl_maintenance SET retry_generation = NULL, retry_not_before = NULL,
    retry_native_only = NULL, retry_stalls = NULL
WHERE id = 1 AND retry_generation = ? AND retry_not_before = ? AND retry_native_only = ?
    AND retry_stalls = ?
    AND (retry_generation <> dirty OR processed >= dirty OR retry_not_before <= ?)
"""
_SET_CURSOR = {
    "last_served_thread": (
        "UPDATE tl_maintenance SET last_served_thread = ?"
        " WHERE id = 1 AND last_served_thread IS NOT ?"
    ),
    "last_recovered_thread": (
        "UPDATE tl_maintenance SET last_recovered_thread = ?"
        " WHERE id = 1 AND last_recovered_thread IS NOT ?"
    ),
    "last_after_native_lane": (
        "UPDATE tl_maintenance SET last_after_native_lane = ?"
        " WHERE id = 1 AND last_after_native_lane IS NOT ?"
    ),
}
_SET_REGISTRY_KEY = """
UPDATE tl_maintenance SET binding_registry_key = ?
WHERE id = 1 AND binding_registry_key IS NOT ?
"""
_SET_LANES_KEY = "UPDATE tl_maintenance SET lanes_key = ? WHERE id = 1 AND lanes_key IS NOT ?"
# Only ever set once: a stored name is never replaced (one object per name).
_SET_SPACE_NAME = "UPDATE tl_maintenance SET space_name = ? WHERE id = 1 AND space_name IS NULL"
_APPEND_EVENTS = """
UPDATE tl_maintenance SET recovery_event_seq = recovery_event_seq + ? WHERE id = 1
"""
_ACK_EVENT = """
UPDATE tl_maintenance SET recovery_event_ack = ?
WHERE id = 1 AND recovery_event_ack = ? AND recovery_event_seq >= ?
"""


@dataclass(frozen=True, slots=True)
class NativeRetry:
    """A durable backoff of native work for one generation; a newer generation obsoletes it.

    ``native_only`` is False when a pass failed outside native work and was backed off as a
    whole (its due lanes deferred to ``not_before`` as well).
    """

    generation: int
    not_before: int
    native_only: bool
    stalls: int


@dataclass(frozen=True, slots=True)
class MaintenanceState:
    """A snapshot of the generation record."""

    dirty: int
    processed: int
    nonterminal: int
    last_served_thread: str | None
    last_recovered_thread: str | None
    last_after_native_lane: str | None
    binding_registry_key: str | None
    retry: NativeRetry | None
    recovery_event_seq: int
    recovery_event_ack: int
    #: The digest of the schedules and host lanes the object last started with (None: never).
    lanes_key: str | None = None
    #: The name of the space the object serves, once it learned it (None: not yet).
    space_name: str | None = None

    @property
    def pending_retry(self) -> NativeRetry | None:
        """The retry if it still applies (it was recorded for the current ``dirty``)."""
        retry = self.retry
        return retry if retry is not None and retry.generation == self.dirty else None

    def retry_defers(self, now: int) -> bool:
        """True while the native retry defers owed native work at ``now``: it was recorded
        for the current generation, which is not processed, and ``not_before`` is ahead."""
        retry = self.pending_retry
        return retry is not None and self.processed < self.dirty and retry.not_before > now

    @property
    def recovery_events_pending(self) -> bool:
        """True while appended recovery events await acknowledgement."""
        return self.recovery_event_seq > self.recovery_event_ack

    def caught_up(self, native: Lane | None, now: int) -> bool:
        """The O(1) check at the start of a pass: no native work is owed at ``now``.

        True when the generation is processed, or its native retry is still in the future
        (a pass fired for another lane must not re-run a failing generation before its
        backoff), and the native lane is not due at ``now`` (a timer or lease deadline
        scheduled on the native lane is owed work even when the generation is processed).
        """
        if self.processed < self.dirty:
            retry = self.pending_retry
            if retry is None or retry.not_before <= now:
                return False
        return native is None or native.due_at is None or native.due_at > now


def ensure_state(storage: Storage) -> None:
    """Create the record at ``dirty=1, processed=0`` if missing; an existing one is kept."""
    storage.exec(_ENSURE)


def read_state(storage: Storage) -> MaintenanceState:
    """Read the generation record (one row)."""
    row = storage.exec(_SELECT).first()
    if row is None:
        raise SchedulingError("the generation record is missing; run the migrations first")
    retry = None
    if row["retry_generation"] is not None:
        retry = NativeRetry(
            generation=int(row["retry_generation"]),
            not_before=int(row["retry_not_before"]),
            native_only=bool(row["retry_native_only"]),
            stalls=int(row["retry_stalls"]),
        )
    return MaintenanceState(
        dirty=int(row["dirty"]),
        processed=int(row["processed"]),
        nonterminal=int(row["nonterminal"]),
        last_served_thread=row["last_served_thread"],
        last_recovered_thread=row["last_recovered_thread"],
        last_after_native_lane=row["last_after_native_lane"],
        binding_registry_key=row["binding_registry_key"],
        retry=retry,
        recovery_event_seq=int(row["recovery_event_seq"]),
        recovery_event_ack=int(row["recovery_event_ack"]),
        lanes_key=row["lanes_key"],
        space_name=row["space_name"],
    )


def bump_dirty(storage: Storage, *, clear_retry: bool = False) -> None:
    """Advance ``dirty`` for a mutation that may create native work.

    ``clear_retry`` drops the native retry record outright (a newer generation already makes
    it obsolete; clearing just keeps the row tidy).
    """
    storage.exec(_BUMP_DIRTY_CLEAR_RETRY if clear_retry else _BUMP_DIRTY)


def acknowledge(storage: Storage, generation: int) -> bool:
    """Certify ``generation`` as processed; True when ``processed`` moved.

    Compare-and-set: ``processed`` only moves forward and never past ``dirty``, so
    acknowledging an older or the same generation again changes nothing.
    """
    return storage.exec(_ACKNOWLEDGE, generation, generation, generation).changed == 1


def acknowledge_counting(storage: Storage, generation: int, nonterminal: int) -> None:
    """:func:`acknowledge` and :func:`set_nonterminal` as one statement (no write when
    neither changes anything); the same compare-and-set on ``processed``."""
    count = int(nonterminal)
    storage.exec(_ACKNOWLEDGE_COUNTING, count, generation, generation, generation,
                 generation, generation, count)


def set_nonterminal(storage: Storage, count: int) -> None:
    """Record how many submissions the last pass left nonterminal in the Threads it visited
    (no write when unchanged)."""
    storage.exec(_SET_NONTERMINAL, int(count), int(count))


def set_retry(storage: Storage, retry: NativeRetry) -> None:
    """Record the native retry (its stall count saturates at :data:`MAX_RETRY_STALLS`)."""
    stalls = min(MAX_RETRY_STALLS, max(0, retry.stalls))
    storage.exec(
        _SET_RETRY, retry.generation, retry.not_before, int(retry.native_only), stalls
    )


def clear_retry(storage: Storage) -> bool:
    """Drop the native retry record (no write when there is none); True when one was dropped.

    A second call finds none and returns False, so only one caller acts on the drop.
    """
    return storage.exec(_CLEAR_RETRY).changed == 1


def end_retry(storage: Storage, now: int, found: NativeRetry) -> bool:
    """After a pass that succeeded: drop the native retry ``found`` at its begin unless it
    still defers owed native work at ``now`` (:meth:`MaintenanceState.retry_defers`); True
    when it was dropped.

    The next failure then backs off from the base again. Compare-and-set on ``found``: a
    retry recorded since (the pass's own checkpoint backing off work that made no progress)
    is not the one that ended, and is kept, whatever ``now`` is by then. No write when there
    is nothing to drop, so repeating it changes nothing.
    """
    stalls = min(MAX_RETRY_STALLS, max(0, found.stalls))
    return storage.exec(_END_RETRY, found.generation, found.not_before, int(found.native_only),
                        stalls, int(now)).changed == 1


def set_cursor(storage: Storage, name: str, value: str | None) -> None:
    """Set a round-robin cursor: ``last_served_thread``, ``last_recovered_thread`` or
    ``last_after_native_lane``."""
    statement = _SET_CURSOR.get(name)
    if statement is None:
        raise SchedulingError(f"unknown maintenance cursor {name!r}")
    storage.exec(statement, value, value)


def set_binding_registry_key(storage: Storage, key: str) -> bool:
    """Record the agent registry key; True only when it changed (the caller then bumps dirty).

    Compare-and-set on the stored key: recording the same key again changes nothing.
    """
    return storage.exec(_SET_REGISTRY_KEY, key, key).changed == 1


def set_lanes_key(storage: Storage, key: str) -> bool:
    """Record the digest of the schedules and host lanes the object started with; True when
    it changed (recording the same one again writes nothing)."""
    return storage.exec(_SET_LANES_KEY, key, key).changed == 1


def set_space_name(storage: Storage, name: str) -> bool:
    """Record the name of the space the object serves; True when it was recorded.

    Only the first name is kept: with one already stored this writes nothing and returns
    False (the caller compares the two), so recording it again changes nothing.
    """
    return storage.exec(_SET_SPACE_NAME, name).changed == 1


def append_recovery_events(storage: Storage, count: int) -> int:
    """Reserve ``count`` recovery-event sequence numbers; return the last one."""
    if count < 0:
        raise SchedulingError("cannot append a negative number of recovery events")
    storage.exec(_APPEND_EVENTS, count)
    return read_state(storage).recovery_event_seq


def acknowledge_recovery_event(storage: Storage, sequence: int) -> bool:
    """Acknowledge recovery event ``sequence``; True when it was the next one due.

    Compare-and-set on ``recovery_event_ack = sequence - 1``: events are acknowledged one by
    one, in order, and acknowledging one twice changes nothing.
    """
    return storage.exec(_ACK_EVENT, sequence, sequence - 1, sequence).changed == 1


__all__ = [
    "MAX_RETRY_STALLS",
    "MaintenanceState",
    "NativeRetry",
    "acknowledge",
    "acknowledge_counting",
    "acknowledge_recovery_event",
    "append_recovery_events",
    "bump_dirty",
    "clear_retry",
    "end_retry",
    "ensure_state",
    "read_state",
    "set_binding_registry_key",
    "set_cursor",
    "set_lanes_key",
    "set_nonterminal",
    "set_retry",
    "set_space_name",
]
