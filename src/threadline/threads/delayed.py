"""Delayed submissions: the rows of ``tl_delayed``, waiting for their due time.

A submission admitted with a due time ahead (``not_before``) takes no place in its Thread's
FIFO yet: it waits here, so input arriving meanwhile is never held behind it. When it falls
due, the ``threadline:delayed`` lane moves it into ``tl_submissions`` under the same id, with
the Thread's next seq (:func:`threadline.threads.ledger.admit_delayed`). Its due time is on
that lane from the transaction that writes it, so the alarm invariant holds.

Every read here goes through a key or an index: the lane's reads (the due rows, the next due
time) are one seek each in ``tl_delayed_due``, whatever the number of rows pending. Writes run
inside the caller's gate transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from threadline.clock import to_epoch_ms
from threadline.errors import ValidationFailed
from threadline.storage.port import Row, Storage
from threadline.threads.model import MAX_SLEEP_SECONDS, ScheduledSubmission, decode_json

_SELECT = (
    "SELECT seq, id, thread_id, agent, idempotency_key, input_json, input_digest, due_at,"
    " created_at, submitted_by, message_hops FROM tl_delayed "
)
_INSERT = (
    "INSERT INTO tl_delayed (id, thread_id, agent, idempotency_key, input_json, input_digest,"
    " due_at, created_at, submitted_by, message_hops) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_BY_ID = _SELECT + "WHERE id = ?"
_BY_KEY = _SELECT + "WHERE thread_id = ? AND idempotency_key = ?"
# The index holds (due_at, rowid): the due rows come in due order, those due at the same
# instant in the order they were made, with no sort. Each read serves the lane twice: the rows
# due now, then the first one that is not, whose due_at is the lane's next deadline. Most
# waves find one row due: the first two rows of the index answer then. Otherwise two seeks
# (at most a batch due, then the next one). Either way what is read is what is returned,
# however many rows wait.
_FIRST_TWO = _SELECT + "INDEXED BY tl_delayed_due ORDER BY due_at, seq LIMIT 2"
_DUE_THEN_NEXT = (
    "SELECT * FROM (SELECT seq, id, thread_id, agent, idempotency_key, input_json,"
    " input_digest, due_at, created_at, submitted_by, message_hops FROM tl_delayed"
    " INDEXED BY tl_delayed_due"
    " WHERE due_at <= ? ORDER BY due_at, seq LIMIT ?)"
    " UNION ALL SELECT * FROM (SELECT seq, id, thread_id, agent, idempotency_key, input_json,"
    " input_digest, due_at, created_at, submitted_by, message_hops FROM tl_delayed"
    " INDEXED BY tl_delayed_due"
    " WHERE due_at > ? ORDER BY due_at, seq LIMIT 1)"
)
_NEXT_DUE = "SELECT due_at FROM tl_delayed INDEXED BY tl_delayed_due ORDER BY due_at LIMIT 1"
_OF_THREAD = (
    _SELECT + "INDEXED BY tl_delayed_thread WHERE thread_id = ? ORDER BY due_at, seq LIMIT ?"
)
# By rowid, and only the row that was read: a row gone since is not taken twice.
_TAKE = "DELETE FROM tl_delayed WHERE seq = ? AND id = ?"

#: How far ahead a delayed submission may fall due: the bound of every durable delay.
MAX_DELAY_MS = MAX_SLEEP_SECONDS * 1_000


@dataclass(frozen=True, slots=True)
class Delayed:
    """One ``tl_delayed`` row as stored (its input still JSON text)."""

    seq: int
    id: str
    thread_id: str
    agent: str
    idempotency_key: str | None
    input_json: str
    #: What a replay of its key compares.
    input_digest: str
    due_at: int
    created_at: int
    #: The subject of the principal that submitted it (None: unknown, or no principal).
    submitted_by: str | None = None
    #: The hop count of the message chain the agent that submitted it was in (0: none).
    message_hops: int = 0

    @property
    def submission(self) -> ScheduledSubmission:
        """The scheduled submission, its input decoded."""
        return ScheduledSubmission(
            id=self.id, thread_id=self.thread_id, agent=self.agent,
            idempotency_key=self.idempotency_key, input=decode_json(self.input_json),
            not_before=self.due_at, created_at=self.created_at,
            submitted_by=self.submitted_by,
        )


def _delayed(row: Row) -> Delayed:
    return Delayed(
        seq=int(row["seq"]), id=str(row["id"]), thread_id=str(row["thread_id"]),
        agent=str(row["agent"]), idempotency_key=row["idempotency_key"],
        input_json=str(row["input_json"]), input_digest=str(row["input_digest"]),
        due_at=int(row["due_at"]), created_at=int(row["created_at"]),
        submitted_by=row["submitted_by"], message_hops=int(row["message_hops"]),
    )


def due_of(at: datetime) -> int:
    """An aware datetime as a due time in epoch milliseconds (a fraction rounded up).

    A time before 1970 is a time long past: like any past time it admits at once, so it is
    taken as 0 (due times count from 1970). Raises :class:`ValidationFailed` naming
    ``not_before`` for a naive datetime (it names no instant) or anything else.
    """
    try:
        return max(0, to_epoch_ms(at))
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"not_before: {exc}", field="not_before") from None


def check_due(not_before: object, now: int) -> int | None:
    """``not_before`` as a due time (epoch ms), or None for none.

    Refused with :class:`ValidationFailed` naming ``not_before``: anything but an int (a
    bool included), a negative one (epoch milliseconds count from 1970: a datetime before
    it goes through :func:`due_of`), and one more than 366 days after ``now``
    (``MAX_SLEEP_SECONDS``). A time at or before ``now`` is accepted: it admits at once.
    """
    if not_before is None:
        return None
    if isinstance(not_before, bool) or not isinstance(not_before, int):
        raise ValidationFailed("not_before must be epoch milliseconds", field="not_before")
    if not_before < 0:
        raise ValidationFailed("not_before in epoch milliseconds is 0 or more",
                               field="not_before")
    if not_before - now > MAX_DELAY_MS:
        raise ValidationFailed(
            f"not_before is more than {MAX_SLEEP_SECONDS} seconds (366 days) ahead",
            field="not_before",
        )
    return not_before


def insert(
    storage: Storage,
    *,
    submission_id: str,
    thread_id: str,
    agent: str,
    idempotency_key: str | None,
    input_json: str,
    input_digest: str,
    due_at: int,
    now: int,
    submitted_by: str | None = None,
    message_hops: int = 0,
) -> ScheduledSubmission:
    """Write a delayed submission; the caller enrolls its due time in the same transaction.
    ``message_hops`` is the hop count it carries into its Thread's FIFO (see
    :func:`~threadline.threads.ledger.enqueue`)."""
    storage.exec(_INSERT, submission_id, thread_id, agent, idempotency_key, input_json,
                 input_digest, due_at, now, submitted_by, message_hops)
    return ScheduledSubmission(
        id=submission_id, thread_id=thread_id, agent=agent, idempotency_key=idempotency_key,
        input=decode_json(input_json), not_before=due_at, created_at=now,
        submitted_by=submitted_by,
    )


def get(storage: Storage, submission_id: str) -> Delayed | None:
    """The delayed submission ``submission_id`` while it has not fallen due, else None."""
    row = storage.exec(_BY_ID, submission_id).first()
    return None if row is None else _delayed(row)


def by_key(storage: Storage, thread_id: str, idempotency_key: str) -> Delayed | None:
    """The Thread's delayed submission made with ``idempotency_key``, if one waits."""
    row = storage.exec(_BY_KEY, thread_id, idempotency_key).first()
    return None if row is None else _delayed(row)


def due_then_next(storage: Storage, now: int, limit: int) -> tuple[list[Delayed], int | None]:
    """At most ``limit`` delayed submissions due at ``now`` in due order, and when the first
    one not due yet falls due (None: none waits). Seeks in the due index: the rows read are
    those returned, however many wait."""
    rows = [_delayed(row) for row in storage.exec(_FIRST_TWO)]
    if limit > 1 and len(rows) == 2 and rows[1].due_at <= now:
        rows = [_delayed(row) for row in storage.exec(_DUE_THEN_NEXT, now, limit, now)]
    due = [row for row in rows if row.due_at <= now][:limit]
    return due, next((row.due_at for row in rows if row.due_at > now), None)


def next_due(storage: Storage) -> int | None:
    """When the earliest delayed submission falls due (one indexed row), or None."""
    value = storage.exec(_NEXT_DUE).scalar()
    return None if value is None else int(value)


def of_thread(storage: Storage, thread_id: str, *, limit: int) -> list[ScheduledSubmission]:
    """The Thread's first ``limit`` delayed submissions, in the order they fall due."""
    return [_delayed(row).submission for row in storage.exec(_OF_THREAD, thread_id, limit)]


def take(storage: Storage, row: Delayed) -> bool:
    """Remove ``row`` as it is being admitted; False when it was already gone (admitted or
    aborted by someone else first)."""
    return storage.exec(_TAKE, row.seq, row.id).changed == 1


__all__ = [
    "MAX_DELAY_MS",
    "Delayed",
    "by_key",
    "check_due",
    "due_of",
    "due_then_next",
    "get",
    "insert",
    "next_due",
    "of_thread",
    "take",
]
