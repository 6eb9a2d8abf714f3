"""The durable side of subscriber delivery: the cursor rows and the log they point into.

Each declared subscriber has one ``tl_subscribers`` row (:class:`SubscriberRow`): its cursor
over ``tl_history``, its failures and its parking. This module holds every statement on those
rows and the reads of the space's log past a cursor (:func:`read_batch`, the required gate's
readout); the per-Thread gate is :mod:`threadline.maintenance.required_gate`, the delivery
itself :mod:`threadline.maintenance.publication_lane`, and what an operator does to a row
(resume, skip, restart) :mod:`threadline.maintenance.subscriber_operations`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from threadline.delivery.subscribers import SubscriberSpec
from threadline.storage.port import Row, Storage
from threadline.threads.model import decode_json, digest
from threadline.threads.records import Record

#: Records stepped over (not wanted) before the cursor row is written for them alone.
SKIP_PERSIST = 1_000

_ALL = (
    "SELECT name, version, cursor, state, failures, retry_at, delivered, delivered_at,"
    " error_type, error, detail, failed_at, reported FROM tl_subscribers ORDER BY name"
)
# Through the partial index tl_subscribers_parked: the parked rows only.
_PARKED_ROWS = (
    "SELECT name, version, cursor, state, failures, retry_at, delivered, delivered_at,"
    " error_type, error, detail, failed_at, reported FROM tl_subscribers"
    " WHERE state = 'parked' ORDER BY name"
)
_INSERT = (
    "INSERT INTO tl_subscribers (name, version, cursor, state) VALUES (?, ?, ?, 'active')"
)
_RESTART = (
    "UPDATE tl_subscribers SET version = ?, cursor = ?, state = 'active', failures = 0,"
    " retry_at = NULL, delivered = 0, delivered_at = NULL, error_type = NULL, error = NULL,"
    " detail = NULL, failed_at = NULL, reported = 0 WHERE name = ?"
)
_DROP = "DELETE FROM tl_subscribers WHERE name = ?"
# Compare-and-set on the parking: a subscriber that moved on since it was read stays as it is.
_RESUME = (
    "UPDATE tl_subscribers SET state = 'active', failures = 0, retry_at = NULL,"
    " error_type = NULL, error = NULL, detail = NULL, failed_at = NULL, reported = 0"
    " WHERE name = ? AND version = ? AND state = 'parked'"
)
# Compare-and-set on the cursor the batch was read after: a batch is consumed once.
_DELIVERED = (
    "UPDATE tl_subscribers SET cursor = ?, failures = 0, retry_at = NULL, error_type = NULL,"
    " error = NULL, failed_at = NULL, delivered = delivered + ?, delivered_at = ?"
    " WHERE name = ? AND version = ? AND cursor = ?"
)
_FAILED = (
    "UPDATE tl_subscribers SET failures = failures + 1, retry_at = ?, error_type = ?,"
    " error = ?, failed_at = ? WHERE name = ? AND version = ?"
)
_PARKED = (
    "UPDATE tl_subscribers SET state = 'parked', failures = failures + 1, retry_at = NULL,"
    " error_type = ?, error = ?, detail = ?, failed_at = ?, reported = 0"
    " WHERE name = ? AND version = ?"
)
_REPORTED = (
    "UPDATE tl_subscribers SET reported = 1 WHERE name = ? AND state = 'parked'"
    " AND reported = 0"
)
# The rowid's maximum is one seek at the end of the table.
_LOG_END = "SELECT COALESCE(MAX(pos), 0) AS pos FROM tl_history"
#: Bytes of a record's JSON besides its body and ids: the keys, quotes and braces, a seq and a
#: created_at of 19 digits each, the comma between records. With the body's and ids' bytes
#: (ids and kinds are ASCII) it bounds ``len(json.dumps(record.to_json()))`` from above.
RECORD_ENVELOPE_BYTES = 128
# A page of the log past a position, cut in SQL where its records' bytes pass a budget, so the
# rows materialised (and the batch made of them) stay within it; the first row comes whatever
# its size when the budget is a batch's whole one (the last ?: 1), so a record larger than
# the bound goes alone and a cursor never sticks on it.
_PAGE = (
    "SELECT pos, thread_id, seq, record_id, submission_id, kind, body_json, created_at, size"
    " FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY pos) AS n,"
    " SUM(size) OVER (ORDER BY pos) AS running FROM ("
    "SELECT pos, thread_id, seq, record_id, submission_id, kind, body_json, created_at,"
    " length(CAST(body_json AS BLOB)) + length(thread_id) + length(record_id)"
    " + COALESCE(length(submission_id), 4) + length(kind) + ? AS size"
    " FROM tl_history WHERE pos > ? ORDER BY pos LIMIT ?))"
    " WHERE running <= ? OR n <= ? ORDER BY pos"
)
# Threads with records past a cursor: read (never written) by the readout of the gate.
_THREADS_PAST = "SELECT DISTINCT thread_id, kind FROM tl_history WHERE pos > ?"
_POSITION_OF = "SELECT pos FROM tl_history WHERE thread_id = ? AND seq = ?"


@dataclass(frozen=True, slots=True)
class SubscriberRow:
    """One subscriber's durable state, as ``tl_subscribers`` holds it."""

    name: str
    version: int
    cursor: int
    state: str
    failures: int = 0
    retry_at: int | None = None
    delivered: int = 0
    delivered_at: int | None = None
    error_type: str | None = None
    error: str | None = None
    detail: str | None = None
    failed_at: int | None = None
    reported: bool = False

    @property
    def parked(self) -> bool:
        """Whether a refusal parked it."""
        return self.state == "parked"


def _row(row: Row) -> SubscriberRow:
    return SubscriberRow(
        name=str(row["name"]), version=int(row["version"]), cursor=int(row["cursor"]),
        state=str(row["state"]), failures=int(row["failures"]), retry_at=row["retry_at"],
        delivered=int(row["delivered"]), delivered_at=row["delivered_at"],
        error_type=row["error_type"], error=row["error"], detail=row["detail"],
        failed_at=row["failed_at"], reported=bool(row["reported"]),
    )


def subscribers_key(subscribers: Iterable[SubscriberSpec]) -> str:
    """A stable digest of the declared subscribers' names, versions, starts and whether each
    is required: start-up reads the cursor rows only when it differs from the last start's
    (one made optional releases what it held)."""
    parts = ["threadline-subscribers:v2"]
    for spec in sorted(subscribers, key=lambda item: item.name):
        parts.extend((spec.name, str(spec.version), spec.start, str(spec.required)))
    return digest(*parts)


def read_rows(storage: Storage) -> dict[str, SubscriberRow]:
    """Every stored subscriber row, by name."""
    return {str(row["name"]): _row(row) for row in storage.exec(_ALL)}


def read_parked(storage: Storage) -> list[SubscriberRow]:
    """The parked subscriber rows, by name (reads no other row)."""
    return [_row(row) for row in storage.exec(_PARKED_ROWS)]


def log_end(storage: Storage) -> int:
    """The position of the newest record of the space's log (0: none)."""
    return int(storage.exec(_LOG_END).one()["pos"])


# -- the cursor rows' writes ---------------------------------------------------------------


def insert_row(storage: Storage, name: str, version: int, cursor: int) -> None:
    """Write the row of a new subscriber, active at ``cursor``."""
    storage.exec(_INSERT, name, version, cursor)


def restart_row(storage: Storage, name: str, version: int) -> None:
    """Start subscriber ``name`` over from the beginning at ``version``, failures cleared."""
    storage.exec(_RESTART, version, 0, name)


def resume_row(storage: Storage, name: str, version: int) -> int:
    """Unpark subscriber ``name`` at ``version`` where its cursor stands, failures cleared;
    return the rows changed (0: it was not parked at that version)."""
    return storage.exec(_RESUME, name, version).changed


def drop_row(storage: Storage, name: str) -> None:
    """Delete the row of subscriber ``name``."""
    storage.exec(_DROP, name)


def write_delivered(
    storage: Storage, name: str, version: int, cursor: int, *, through: int, batches: int,
    now: int,
) -> int:
    """Move the cursor from ``cursor`` (compare-and-set) to ``through``, counting ``batches``
    delivered at ``now`` and clearing the failures; return the rows changed (1, or 0 when
    someone else moved it)."""
    return storage.exec(_DELIVERED, through, batches, now, name, version, cursor).changed


def write_failed(
    storage: Storage, name: str, version: int, *, retry_at: int, error_type: str, error: str,
    now: int,
) -> None:
    """Count one more failure of subscriber ``name``, retried at ``retry_at``."""
    storage.exec(_FAILED, retry_at, error_type, error, now, name, version)


def write_parked(
    storage: Storage, name: str, version: int, *, error_type: str, error: str,
    detail: str | None, now: int,
) -> None:
    """Park subscriber ``name`` with its refusal, not reported yet."""
    storage.exec(_PARKED, error_type, error, detail, now, name, version)


def mark_reported(storage: Storage, name: str) -> int:
    """Mark the parking of ``name`` reported; return 1 when this call took the report."""
    return storage.exec(_REPORTED, name).changed


# -- the log past a cursor -----------------------------------------------------------------


def _record(row: Row) -> Record:
    return Record(
        thread_id=str(row["thread_id"]), seq=int(row["seq"]), record_id=str(row["record_id"]),
        submission_id=row["submission_id"], kind=str(row["kind"]),
        body=decode_json(str(row["body_json"])), created_at=int(row["created_at"]),
    )


@dataclass
class Batch:
    """The records a subscriber wants next, and how far reading them went."""

    records: list[Record]
    #: The position of the last record read (wanted or not): where the cursor goes.
    through: int


def read_batch(storage: Storage, spec: SubscriberSpec, after: int) -> Batch | None:
    """The next records ``spec`` wants after position ``after``, up to its ``batch`` records
    and its ``batch_bytes`` (the records read, wanted or not, as JSON: see
    :data:`RECORD_ENVELOPE_BYTES`; a first record larger than that comes alone); None when
    nothing is left to read."""
    wanted: list[Record] = []
    through = after
    used = 0
    # Read pages until the batch is full (in records or bytes) or the log ends, stepping over
    # at most SKIP_PERSIST unwanted records: the reads of one batch stay bounded.
    while len(wanted) < spec.batch and through - after < SKIP_PERSIST:
        first = 1 if used == 0 else 0
        rows = storage.exec(_PAGE, RECORD_ENVELOPE_BYTES, through, spec.batch,
                            spec.batch_bytes - used, first).rows
        for item in rows:
            if len(wanted) == spec.batch:
                break
            through = int(item["pos"])
            used += int(item["size"])
            if spec.wants(str(item["kind"])):
                wanted.append(_record(item))
        # A short page: the log ended, or the bytes did.
        if len(rows) < spec.batch:
            break
    if through == after:
        return None
    return Batch(wanted, through)


def threads_past(storage: Storage, cursor: int) -> Iterator[tuple[str, str]]:
    """The distinct ``(thread_id, kind)`` of the records past ``cursor``."""
    for item in storage.exec(_THREADS_PAST, cursor):
        yield str(item["thread_id"]), str(item["kind"])


def position_of(storage: Storage, record: Record) -> int:
    """The position of ``record`` in the space's log (one primary-key seek)."""
    return int(storage.exec(_POSITION_OF, record.thread_id, record.seq).one()["pos"])


__all__ = [
    "RECORD_ENVELOPE_BYTES",
    "SKIP_PERSIST",
    "Batch",
    "SubscriberRow",
    "drop_row",
    "insert_row",
    "log_end",
    "mark_reported",
    "position_of",
    "read_batch",
    "read_parked",
    "read_rows",
    "restart_row",
    "resume_row",
    "subscribers_key",
    "threads_past",
    "write_delivered",
    "write_failed",
    "write_parked",
]
