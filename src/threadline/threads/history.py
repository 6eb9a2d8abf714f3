"""A Thread's log (``tl_history``): the one ordered record of what happened in it.

It holds what agents emit and, under the reserved kinds of :mod:`threadline.records`, the
runtime's own facts: a settlement (``submission.settled``), an approval request
(``approval.requested``), a message refused for good (``message.failed``). Each record is
appended in the transaction of the fact it reports, so a consumer that has read a Thread up to
some seq has missed nothing before it: the SSE stream resumes from a seq, subscribers keep one
cursor per Thread.

Record ids are derived from the submission and the record's place in it (``<submission>:settled``,
``<submission>:approval:<key>``, ``<submission>:<step key>``), never from a clock or a counter of
this incarnation, so a replayed Attempt finds its record already written instead of appending a
duplicate, and a consumer can deduplicate deliveries by id. Each writer appends its id once by
the guard of its own fact: a settlement by its compare-and-set, an approval request by its
wait's uniqueness, an emitted record by the id it finds (:func:`history_has`).
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
_READ_HISTORY = (
    "SELECT seq, record_id, submission_id, kind, body_json, created_at FROM tl_history"
    " WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)



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
    """Append a record to the Thread's log; returns its seq.

    Run it in the transaction of the fact the record reports, under that fact's guard, so
    the record is written once and only with its fact.
    """
    seq = int(storage.exec(_NEXT_HISTORY_SEQ, thread_id).one()["seq"])
    storage.exec(_INSERT_HISTORY, thread_id, seq, record_id, submission_id, kind, body_json, now)
    return seq


def history_has(storage: Storage, record_id: str) -> bool:
    """True when the log already holds ``record_id``."""
    return storage.exec(_HISTORY_EXISTS, record_id).first() is not None


def last_history_seq(storage: Storage, thread_id: str) -> int:
    """The seq of the Thread's newest record; 0 when it has none (or was never written)."""
    return int(storage.exec(_LAST_HISTORY_SEQ, thread_id).one()["seq"])


def read_history(
    storage: Storage, thread_id: str, *, after: int = 0, limit: int = 100
) -> list[dict[str, object]]:
    """A page of the Thread's records after ``after``, oldest first."""
    return storage.exec(_READ_HISTORY, thread_id, after, limit).rows


__all__ = ["append_history", "history_has", "last_history_seq", "read_history"]
