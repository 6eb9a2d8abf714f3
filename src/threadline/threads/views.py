"""Read-only views of Threads for the HTTP surface: pages, summaries, waits and the journal.

Nothing here writes. Each read is bounded (a page, one Thread, one submission) and goes through
a primary key or an index, so answering a client never scans the object's whole history.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadline.storage.port import Row, Storage
from threadline.threads import message_rows
from threadline.threads.ledger import work_item
from threadline.threads.model import JsonValue, WorkItem, decode_json

# A Thread's row is written by its first admission only. Its newest submission and its newest
# history record are each one seek at the end of a key range (UNIQUE (thread_id, seq) and
# tl_history's primary key): how many submissions it has had, its newest record's seq, and
# when it last changed. The open count reads the partial index tl_submissions_open, so it
# follows open work only (API reads: the IN list costs workerd two rows read more than two
# ranges would).
_THREAD_COLUMNS = (
    "SELECT t.id, t.created_at, COALESCE(s.seq, 0) AS submissions,"
    " COALESCE(h.seq, 0) AS history_seq,"
    " MAX(t.updated_at, COALESCE(s.created_at, 0), COALESCE(h.created_at, 0)) AS updated_at,"
    " (SELECT COUNT(*) FROM tl_submissions o INDEXED BY tl_submissions_open"
    " WHERE o.thread_id = t.id AND o.settled_at IS NULL AND o.dormant IN (0, 1))"
    " AS open_count FROM tl_threads t"
    " LEFT JOIN tl_submissions s ON s.thread_id = t.id"
    " AND s.seq = (SELECT MAX(seq) FROM tl_submissions WHERE thread_id = t.id)"
    " LEFT JOIN tl_history h ON h.thread_id = t.id"
    " AND h.seq = (SELECT MAX(seq) FROM tl_history WHERE thread_id = t.id)"
)
_THREADS_PAGE = _THREAD_COLUMNS + " WHERE t.id > ? ORDER BY t.id LIMIT ?"
_THREAD = _THREAD_COLUMNS + " WHERE t.id = ?"
# The same predicate as the partial index tl_submissions_open: it reads open work only.
_OPEN_PAGE = (
    "SELECT id, thread_id, seq, agent, state, revision, attempts, not_before, lease_expires_at,"
    " lease_owner, dormant FROM tl_submissions INDEXED BY tl_submissions_open"
    " WHERE settled_at IS NULL AND dormant IN (0, 1)"
    " AND thread_id = ? ORDER BY seq LIMIT ?"
)
_WAITS_OF = (
    "SELECT kind, wait_key, state, payload_json, decision_json, wake_at, created_at,"
    " resolved_at, decided_by FROM tl_waits WHERE submission_id = ? ORDER BY created_at, id"
)
_JOURNAL_OF = (
    "SELECT step_key, position, effect, state, attempt, started_at, finished_at"
    " FROM tl_journal WHERE submission_id = ? ORDER BY position, step_key"
)


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    """One Thread's row: how many submissions and history records it has had."""

    id: str
    submissions: int
    history_seq: int
    open_submissions: int
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """A wait of a submission in any state, with its decision."""

    kind: str
    key: str
    state: str
    payload: JsonValue
    decision: JsonValue
    wake_at: int | None
    created_at: int
    resolved_at: int | None
    #: Who decided it (an approval) or resolved it (an Unknown Outcome); None: unknown.
    decided_by: str | None = None


@dataclass(frozen=True, slots=True)
class JournalStep:
    """A journal entry without its value: where a submission's durable work stands."""

    key: str
    position: int
    effect: str
    state: str
    attempt: int
    started_at: int
    finished_at: int | None


def _thread(row: Row) -> ThreadRecord:
    return ThreadRecord(
        id=row["id"],
        submissions=int(row["submissions"]),
        history_seq=int(row["history_seq"]),
        open_submissions=int(row["open_count"]),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
    )


def threads_page(storage: Storage, *, after: str | None, limit: int) -> list[ThreadRecord]:
    """Up to ``limit`` Threads whose id sorts after ``after``, in id order."""
    return [_thread(row) for row in storage.exec(_THREADS_PAGE, after or "", limit)]


def thread(storage: Storage, thread_id: str) -> ThreadRecord | None:
    """The Thread, or None when no submission ever created it."""
    row = storage.exec(_THREAD, thread_id).first()
    return None if row is None else _thread(row)


def open_submissions(storage: Storage, thread_id: str, *, limit: int) -> list[WorkItem]:
    """The Thread's first ``limit`` open submissions in FIFO order (control columns only)."""
    return [work_item(row) for row in storage.exec(_OPEN_PAGE, thread_id, limit)]


def waits_of(storage: Storage, submission_id: str) -> list[WaitRecord]:
    """Every wait the submission ever had, oldest first."""
    return [
        WaitRecord(
            kind=row["kind"],
            key=row["wait_key"],
            state=row["state"],
            payload=decode_json(row["payload_json"]),
            decision=decode_json(row["decision_json"]),
            wake_at=row["wake_at"],
            created_at=int(row["created_at"]),
            resolved_at=row["resolved_at"],
            decided_by=row["decided_by"],
        )
        for row in storage.exec(_WAITS_OF, submission_id)
    ]


def journal_of(storage: Storage, submission_id: str) -> list[JournalStep]:
    """The submission's journal entries in the order its agent reached them."""
    return [
        JournalStep(
            key=row["step_key"],
            position=int(row["position"]),
            effect=row["effect"],
            state=row["state"],
            attempt=int(row["attempt"]),
            started_at=int(row["started_at"]),
            finished_at=row["finished_at"],
        )
        for row in storage.exec(_JOURNAL_OF, submission_id)
    ]


def messages_of(storage: Storage, submission_id: str) -> list[message_rows.Message]:
    """The messages the submission sent (at most ``MESSAGES_LISTED``), in the order it sent
    them: one range of ``tl_messages``' primary key."""
    return message_rows.of_submission(storage, submission_id)


__all__ = [
    "JournalStep",
    "ThreadRecord",
    "WaitRecord",
    "journal_of",
    "messages_of",
    "open_submissions",
    "thread",
    "threads_page",
    "waits_of",
]
