"""Canonical history (``tl_history``) and the publication outbox (``tl_outbox``).

A record is appended to the Thread's history and to the outbox in the same transaction as the
fact it reports. Record ids are derived from the submission and the record's place in it, never
from a clock or a counter of this incarnation, so a replayed Attempt finds its record already
written instead of appending a duplicate, and a subscriber can deduplicate deliveries by id.
"""

from __future__ import annotations

from threadline.storage.port import Storage

_HISTORY_EXISTS = "SELECT 1 AS present FROM tl_history WHERE record_id = ?"
# One seek at the end of the Thread's primary-key range: a read instead of a counter row to
# rewrite per record. The read and the insert after it run in one synchronous transaction of
# the object, so no other append can take the same seq in between (and the primary key would
# refuse it if one did).
_NEXT_HISTORY_SEQ = (
    "SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM tl_history WHERE thread_id = ?"
)
_LAST_HISTORY_SEQ = "SELECT COALESCE(MAX(seq), 0) AS seq FROM tl_history WHERE thread_id = ?"
_INSERT_HISTORY = (
    "INSERT INTO tl_history (thread_id, seq, record_id, submission_id, kind, body_json,"
    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_OUTBOX = (
    "INSERT INTO tl_outbox (record_id, thread_id, kind, body_json, created_at)"
    " VALUES (?, ?, ?, ?, ?)"
)
_READ_HISTORY = (
    "SELECT seq, record_id, submission_id, kind, body_json, created_at FROM tl_history"
    " WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)


def history_has(storage: Storage, record_id: str) -> bool:
    """True when the history already holds ``record_id``."""
    return storage.exec(_HISTORY_EXISTS, record_id).first() is not None


def append_history(
    storage: Storage,
    *,
    record_id: str,
    thread_id: str,
    submission_id: str | None,
    kind: str,
    body_json: str,
    now: int,
) -> int:
    """Append a canonical record to the Thread's history and publish it; returns its seq."""
    seq = int(storage.exec(_NEXT_HISTORY_SEQ, thread_id).one()["seq"])
    storage.exec(_INSERT_HISTORY, thread_id, seq, record_id, submission_id, kind, body_json, now)
    publish(storage, record_id=record_id, thread_id=thread_id, kind=kind, body_json=body_json,
            now=now)
    return seq


def publish(
    storage: Storage, *, record_id: str, thread_id: str, kind: str, body_json: str, now: int
) -> None:
    """Put a record in the outbox, in the transaction of the fact it reports.

    The outbox does not check ids (a unique index would cost a billed row per record): each
    caller publishes an id once by the constraint of its own fact, a history record by
    tl_history's unique ``record_id``, a settlement by its compare-and-set, an approval
    request by its wait's uniqueness.
    """
    storage.exec(_INSERT_OUTBOX, record_id, thread_id, kind, body_json, now)


def last_history_seq(storage: Storage, thread_id: str) -> int:
    """The seq of the Thread's newest record; 0 when it has none (or was never written)."""
    return int(storage.exec(_LAST_HISTORY_SEQ, thread_id).one()["seq"])


def read_history(
    storage: Storage, thread_id: str, *, after: int = 0, limit: int = 100
) -> list[dict[str, object]]:
    """A page of the Thread's canonical records after ``after``, oldest first."""
    return storage.exec(_READ_HISTORY, thread_id, after, limit).rows


__all__ = ["append_history", "history_has", "last_history_seq", "publish", "read_history"]
