"""Durable waits (``tl_waits``): approvals, timers and Unknown Outcomes of a submission.

A wait is ``open`` until it is resolved (a decision, a due timer, a resolution) or cancelled
(its submission settled). Every change is a compare-and-set on ``state = 'open'``, so a decision
delivered twice, or a timer applied by two recoveries, changes the row once.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadline.storage.port import Row, Storage
from threadline.threads.model import JsonValue, WaitKind, WaitState, decode_json

_FIND = (
    "SELECT id, submission_id, kind, wait_key, state, payload_json, decision_json, wake_at"
    " FROM tl_waits WHERE submission_id = ? AND kind = ? AND wait_key = ?"
)
_OPEN_OF = (
    "SELECT id, submission_id, kind, wait_key, state, payload_json, decision_json, wake_at"
    " FROM tl_waits WHERE submission_id = ? AND state = 'open'"
)
# Control columns only: classifying a suspension never decodes a payload or a decision.
_OPEN_KINDS_OF = "SELECT kind, wake_at FROM tl_waits WHERE submission_id = ? AND state = 'open'"
# Both read tl_waits_open alone (wake_at, kind, thread_id, state WHERE state = 'open', a
# covering index): only due timers, or the single earliest one, are visited, however many
# timers are pending, and neither a wait's row nor its submission is read.
# No DISTINCT or ORDER BY: a sorter's rows are billed as read too; the few due timers are
# deduplicated and ordered here.
_DUE_TIMER_THREADS = (
    "SELECT thread_id FROM tl_waits WHERE state = 'open' AND wake_at <= ? AND kind = 'timer'"
)
_NEXT_TIMER = (
    "SELECT MIN(wake_at) AS wake_at FROM tl_waits"
    " WHERE state = 'open' AND wake_at > ? AND kind = 'timer'"
)
_INSERT = (
    "INSERT INTO tl_waits (id, submission_id, thread_id, kind, wait_key, state, payload_json,"
    " wake_at, created_at) VALUES (?, ?, ?, ?, ?, 'open', ?, ?, ?)"
    " ON CONFLICT (submission_id, kind, wait_key) DO NOTHING"
)
_RESOLVE = (
    "UPDATE tl_waits SET state = 'resolved', decision_json = ?, resolved_at = ?, decided_by = ?"
    " WHERE id = ? AND state = 'open'"
)
_CANCEL_OPEN = (
    "UPDATE tl_waits SET state = 'cancelled', resolved_at = ?"
    " WHERE submission_id = ? AND state = 'open'"
)


@dataclass(frozen=True, slots=True)
class Wait:
    """One durable wait."""

    id: str
    submission_id: str
    kind: WaitKind
    key: str
    state: WaitState
    payload: JsonValue
    decision: JsonValue
    wake_at: int | None


def _wait(row: Row) -> Wait:
    wake_at = row["wake_at"]
    return Wait(
        id=row["id"],
        submission_id=row["submission_id"],
        kind=WaitKind(row["kind"]),
        key=row["wait_key"],
        state=WaitState(row["state"]),
        payload=decode_json(row["payload_json"]),
        decision=decode_json(row["decision_json"]),
        wake_at=None if wake_at is None else int(wake_at),
    )


def find(storage: Storage, submission_id: str, kind: WaitKind, key: str) -> Wait | None:
    """The wait of ``kind`` named ``key`` for the submission, in any state."""
    row = storage.exec(_FIND, submission_id, kind.value, key).first()
    return None if row is None else _wait(row)


def open_waits(storage: Storage, submission_id: str) -> list[Wait]:
    """Every open wait of the submission."""
    return [_wait(row) for row in storage.exec(_OPEN_OF, submission_id)]


def open_wait_deadlines(storage: Storage, submission_id: str) -> list[tuple[str, int | None]]:
    """``(kind, wake_at)`` of every open wait of the submission, decoding nothing else."""
    return [
        (str(row["kind"]), None if row["wake_at"] is None else int(row["wake_at"]))
        for row in storage.exec(_OPEN_KINDS_OF, submission_id)
    ]


def due_timer_threads(storage: Storage, now: int) -> list[str]:
    """Threads of submissions with an open timer due at ``now``, read through the due index."""
    return sorted({str(row["thread_id"]) for row in storage.exec(_DUE_TIMER_THREADS, now)})


def next_timer(storage: Storage, now: int) -> int | None:
    """The earliest open timer after ``now`` (one index entry read), or None.

    A lower bound of the next suspension to wake: a suspension wakes when its last timer is
    due, and not at all while it also waits on something else. Waking early costs one pass
    that finds the suspension not yet due; the timer is then at or before ``now`` and no
    longer counted here, so it cannot re-arm the alarm in a loop.
    """
    value = storage.exec(_NEXT_TIMER, now).scalar()
    return None if value is None else int(value)


def open_wait(
    storage: Storage,
    wait_id: str,
    submission_id: str,
    kind: WaitKind,
    key: str,
    *,
    thread_id: str,
    now: int,
    payload_json: str | None = None,
    wake_at: int | None = None,
) -> bool:
    """Open a wait of the submission, on its Thread ``thread_id``; an existing wait of the same
    kind and key is kept. True when inserted."""
    written = storage.exec(
        _INSERT, wait_id, submission_id, thread_id, kind.value, key, payload_json, wake_at, now
    ).changed
    return written == 1


def resolve(
    storage: Storage,
    wait_id: str,
    *,
    decision_json: str | None,
    now: int,
    decided_by: str | None = None,
) -> bool:
    """Resolve an open wait; False when it was no longer open (nothing changed).

    ``decided_by`` is the subject of the principal whose decision resolved it (None: unknown,
    or no principal: a timer falling due, an event)."""
    return storage.exec(_RESOLVE, decision_json, now, decided_by, wait_id).changed == 1


def cancel_open(storage: Storage, submission_id: str, *, now: int) -> int:
    """Cancel every open wait of a submission that is settling; returns how many."""
    return storage.exec(_CANCEL_OPEN, now, submission_id).changed


__all__ = [
    "Wait",
    "cancel_open",
    "due_timer_threads",
    "find",
    "next_timer",
    "open_wait",
    "open_wait_deadlines",
    "open_waits",
    "resolve",
]
