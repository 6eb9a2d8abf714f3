"""A Thread's log (``tl_history``): the one ordered record of what happened in it.

It holds what agents emit and, under the reserved kinds of :mod:`threadline.threads.records`, the
runtime's own facts: a settlement (``submission.settled``), an approval request
(``approval.requested``) and its decision (``approval.decided``), a message refused for good
(``message.failed``), a record an operator made a subscriber skip (``subscriber.skipped``).
Each record is appended in the transaction of the fact it reports, so a consumer that has read a
Thread up to some seq has missed nothing before it: the SSE stream resumes from a seq,
subscribers keep one cursor per Thread. With ``retention_ms`` set, the retention lane
(:mod:`threadline.maintenance.retention_lane`) deletes a Thread's oldest records, always a
prefix and never its newest: the kept seqs run without a hole from the first kept one, and a
reader from before it is told so (``first_kept``, ``event: horizon``).

Record ids are derived from the submission and the record's place in it (``<submission>:settled``,
``<submission>:approval:<key>``, ``<submission>:approval:<key>:decided``,
``<submission>:<step key>``), never from a clock or a counter of this incarnation, so a replayed
Attempt finds its record already written instead of appending a duplicate, and a consumer can
deduplicate deliveries by id. The log does not enforce them unique (an index would cost a
billed row per record): each writer appends its id once by the guard of its own fact, a
settlement by its compare-and-set, an approval request by its wait's uniqueness, a decision by
the compare-and-set that resolves its wait, an emitted record by its Attempt finding the
submission's records already written (:func:`submission_records`).
"""

from __future__ import annotations

from dataclasses import dataclass

from threadline.storage.port import Row, Storage

#: Records one page of a Thread's log holds at most, when read to catch up.
PAGE_RECORDS = 100
#: Bytes of record bodies one page holds at most (a larger record is read alone).
PAGE_BYTES = 1_048_576

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
# One page: the innermost SELECT seeks the Thread's range and reads at most ``limit`` rows (the
# count bound, and all that storage reads); the window over them keeps the prefix whose bodies
# fit in the byte bound (the first record always, however large), so no more than that leaves
# SQLite. ``fetched`` says how many rows the count bound read: more than returned means the
# bytes cut the page short.
_READ_HISTORY = (
    "SELECT seq, record_id, submission_id, kind, body_json, created_at, fetched FROM ("
    " SELECT seq, record_id, submission_id, kind, body_json, created_at,"
    " ROW_NUMBER() OVER w AS n, SUM(size) OVER w AS upto, COUNT(*) OVER () AS fetched FROM ("
    " SELECT seq, record_id, submission_id, kind, body_json, created_at,"
    " length(CAST(body_json AS BLOB)) AS size FROM tl_history"
    " WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?)"
    " WINDOW w AS (ORDER BY seq ROWS UNBOUNDED PRECEDING))"
    " WHERE n = 1 OR upto <= ? ORDER BY seq"
)
# The newest records before a seq (of some kinds, when the JSON array parameter is not NULL):
# the innermost SELECT walks the Thread's range back from ``before`` and stops at ``limit``
# matches; the window keeps the newest of them whose bodies fit in the byte bound, so the
# page is the most recent context that fits, returned oldest first.
_READ_EARLIER = (
    "SELECT seq, record_id, submission_id, kind, body_json, created_at FROM ("
    " SELECT seq, record_id, submission_id, kind, body_json, created_at,"
    " SUM(size) OVER (ORDER BY seq DESC ROWS UNBOUNDED PRECEDING) AS upto FROM ("
    " SELECT seq, record_id, submission_id, kind, body_json, created_at,"
    " length(CAST(body_json AS BLOB)) AS size FROM tl_history"
    " WHERE thread_id = ? AND (? IS NULL OR seq < ?)"
    " AND (? IS NULL OR kind IN (SELECT value FROM json_each(?)))"
    " ORDER BY seq DESC LIMIT ?))"
    " WHERE upto <= ? ORDER BY seq"
)
# A submission's records all follow its first claim (``history_from``, the Thread's last seq
# then): nothing appends one for it before. So this reads the Thread's range since that claim,
# not its whole log. NULL (never claimed) reads nothing: such a submission has no record.
_SUBMISSION_RECORDS = (
    "SELECT h.record_id FROM tl_submissions s JOIN tl_history h"
    " ON h.thread_id = s.thread_id AND h.seq > s.history_from AND h.submission_id = s.id"
    " WHERE s.id = ?"
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

    Run it in the transaction of the fact the record reports, under that fact's guard: the
    log does not refuse a second record with the same id.
    """
    seq = int(storage.exec(_NEXT_HISTORY_SEQ, thread_id).one()["seq"])
    storage.exec(_INSERT_HISTORY, thread_id, seq, record_id, submission_id, kind, body_json, now)
    return seq


def submission_records(storage: Storage, submission_id: str) -> set[str]:
    """The ids of the records the log holds for a claimed submission (empty if none).

    Reads the Thread's records since the submission's first claim only (see
    ``tl_submissions.history_from``).
    """
    return {str(row["record_id"])
            for row in storage.exec(_SUBMISSION_RECORDS, submission_id).rows}


def last_history_seq(storage: Storage, thread_id: str) -> int:
    """The seq of the Thread's newest record; 0 when it has none (or was never written)."""
    return int(storage.exec(_LAST_HISTORY_SEQ, thread_id).one()["seq"])


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """A page of a Thread's records, oldest first, and whether more follow it."""

    rows: list[Row]
    #: True when records after the last row exist, as far as the page's read saw.
    more: bool


def read_history_page(
    storage: Storage, thread_id: str, *, after: int = 0, limit: int = PAGE_RECORDS,
    max_bytes: int = PAGE_BYTES,
) -> HistoryPage:
    """The Thread's records after ``after``: at most ``limit`` of them, and no more than
    ``max_bytes`` of bodies unless the first alone is larger (it is returned alone).

    Storage reads ``limit + 1`` rows at most, whatever the log's length; ``more`` is True when
    a record past the page exists (the count or the bytes ended it).
    """
    rows = storage.exec(_READ_HISTORY, thread_id, after, limit + 1, max_bytes).rows
    fetched = int(rows[0]["fetched"]) if rows else 0
    page = rows[:limit]
    for row in page:
        del row["fetched"]
    return HistoryPage(page, fetched > len(page))


def read_earlier(
    storage: Storage, thread_id: str, *, before: int | None, limit: int,
    kinds_json: str | None, max_bytes: int,
) -> list[Row]:
    """The Thread's newest records (with a seq below ``before`` unless None), oldest first: at most
    ``limit`` of them, only kinds in the JSON array ``kinds_json`` unless it is None, and only
    the newest whose bodies fit ``max_bytes`` together (a contiguous run back from the
    newest)."""
    return storage.exec(_READ_EARLIER, thread_id, before, before, kinds_json, kinds_json,
                        limit, max_bytes).rows


def read_history(
    storage: Storage, thread_id: str, *, after: int = 0, limit: int = PAGE_RECORDS,
    max_bytes: int = PAGE_BYTES,
) -> list[Row]:
    """A page of the Thread's records after ``after``, oldest first (see
    :func:`read_history_page`)."""
    return read_history_page(
        storage, thread_id, after=after, limit=limit, max_bytes=max_bytes).rows


__all__ = [
    "PAGE_BYTES",
    "PAGE_RECORDS",
    "HistoryPage",
    "append_history",
    "last_history_seq",
    "read_earlier",
    "read_history",
    "read_history_page",
    "submission_records",
]
