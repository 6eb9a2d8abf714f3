"""The required gate's durable side: per-Thread holds and the seeks that decide a Thread.

A Thread may start native work when every required subscriber has consumed its records (those
it wants). That is decided per Thread, at a cost that does not grow with the log:

* a Thread a subscriber failed on has a **hold** (``tl_subscriber_holds``, :class:`Hold`): its
  records from ``since_seq`` on are owed to that subscriber and delivered on their own, at the
  hold's ``retry_at`` (never, while it is parked), while the subscriber's cursor goes on over
  every other Thread. A held Thread is gated, whatever its log holds;
* any other Thread is gated when a record the subscriber wants lies past the subscriber's
  position: :func:`wanted_past` walks back from the end of the Thread's log over the records
  past that position, at most :data:`LOOKBACK` of them. That walk is what the Thread appended
  since the subscriber last read past it, never its whole log; a Thread with more records than
  that past the position (a subscriber replaying the log from the beginning) waits until the
  subscriber has read past them, wanted or not.

A failed batch is charged to the Thread of its first record, the oldest the subscriber owes:
should the failure lie with another Thread's record, the batch without the held Thread fails
next and is charged to that one, while the Thread held first is delivered alone at its retry.
The delivery itself is :mod:`threadline.maintenance.publication_lane`.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from threadline.storage.port import Row, Storage
from threadline.threads.model import decode_json
from threadline.threads.records import Record

#: A hold backing off until ``retry_at``, or parked until a deploy bumps the subscriber.
BACKING_OFF, PARKED = "backing-off", "parked"
#: The most records past a subscriber's position one gate check reads of a Thread.
LOOKBACK = 100

_ALL = (
    "SELECT name, thread_id, since_seq, state, failures, retry_at, error_type, error, detail,"
    " failed_at, reported FROM tl_subscriber_holds ORDER BY name, thread_id"
)
_INSERT = (
    "INSERT INTO tl_subscriber_holds (name, thread_id, since_seq, state, failures, retry_at,"
    " error_type, error, detail, failed_at) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?)"
)
_FAILED = (
    "UPDATE tl_subscriber_holds SET state = ?, failures = failures + 1, retry_at = ?,"
    " error_type = ?, error = ?, detail = ?, failed_at = ?, reported = 0"
    " WHERE name = ? AND thread_id = ?"
)
# Compare-and-set on where the delivered batch began: a hold's records are consumed once.
_ADVANCED = (
    "UPDATE tl_subscriber_holds SET since_seq = ? WHERE name = ? AND thread_id = ?"
    " AND since_seq = ?"
)
_RELEASED = (
    "DELETE FROM tl_subscriber_holds WHERE name = ? AND thread_id = ? AND since_seq = ?"
)
_DROP_ALL = "DELETE FROM tl_subscriber_holds WHERE name = ?"
# An operator's resume: every hold of the subscriber is tried again at once, its streak
# started over (one failure: the one that made the hold).
_RESUMED = (
    "UPDATE tl_subscriber_holds SET state = 'backing-off', failures = 1, retry_at = NULL,"
    " error_type = NULL, error = NULL, detail = NULL, reported = 0 WHERE name = ?"
)
# A start whose environment lifts a hold's parking: that hold alone, if still parked.
_UNPARKED = (
    "UPDATE tl_subscriber_holds SET state = 'backing-off', failures = 1, retry_at = NULL,"
    " error_type = NULL, error = NULL, detail = NULL, reported = 0"
    " WHERE name = ? AND thread_id = ? AND state = 'parked'"
)
# An operator's skip of a held Thread's first owed record: compare-and-set on where the hold
# stood, so a repeated skip finds it moved and changes nothing.
_SKIPPED = (
    "UPDATE tl_subscriber_holds SET since_seq = ?, state = 'backing-off', failures = 1,"
    " retry_at = NULL, error_type = NULL, error = NULL, detail = NULL, reported = 0"
    " WHERE name = ? AND thread_id = ? AND since_seq = ?"
)
_REPORTED = (
    "UPDATE tl_subscriber_holds SET reported = 1 WHERE name = ? AND thread_id = ?"
    " AND state = 'parked' AND reported = 0"
)
# A held Thread's records in log order, from where it is owed: a seek on UNIQUE (thread_id, seq).
_THREAD_PAGE = (
    "SELECT pos, thread_id, seq, record_id, submission_id, kind, body_json, created_at"
    " FROM tl_history WHERE thread_id = ? AND seq >= ? ORDER BY seq LIMIT ?"
)
# Within a Thread pos grows with seq: its newest records first, from the end of its range.
_NEWEST_OF_THREAD = (
    "SELECT pos, kind FROM tl_history WHERE thread_id = ? ORDER BY seq DESC LIMIT ?"
)


@dataclass(frozen=True, slots=True)
class Hold:
    """A Thread whose records from ``since_seq`` on one subscriber still owes."""

    name: str
    thread_id: str
    since_seq: int
    state: str
    failures: int
    retry_at: int | None
    error_type: str | None
    error: str | None
    detail: str | None
    failed_at: int
    reported: bool = False

    @property
    def parked(self) -> bool:
        """Whether a refusal parked it."""
        return self.state == PARKED

    def due(self, now: int) -> bool:
        """Whether its records may be tried again at ``now``."""
        return not self.parked and (self.retry_at is None or self.retry_at <= now)

    def shown(self) -> dict[str, object]:
        """What ``/maintenance`` shows of it."""
        return {"thread": self.thread_id, "since_seq": self.since_seq, "state": self.state,
                "failures": self.failures, "retry_at": self.retry_at,
                "error_type": self.error_type, "error": self.error, "detail": self.detail,
                "failed_at": self.failed_at}


def _hold(row: Row) -> Hold:
    return Hold(
        name=str(row["name"]), thread_id=str(row["thread_id"]),
        since_seq=int(row["since_seq"]), state=str(row["state"]),
        failures=int(row["failures"]), retry_at=row["retry_at"], error_type=row["error_type"],
        error=row["error"], detail=row["detail"], failed_at=int(row["failed_at"]),
        reported=bool(row["reported"]),
    )


def read_holds(storage: Storage) -> dict[str, dict[str, Hold]]:
    """Every stored hold, by subscriber, then Thread."""
    out: dict[str, dict[str, Hold]] = {}
    for row in storage.exec(_ALL):
        hold = _hold(row)
        out.setdefault(hold.name, {})[hold.thread_id] = hold
    return out


def insert_hold(storage: Storage, hold: Hold) -> None:
    """Write a new hold (its first failure)."""
    storage.exec(_INSERT, hold.name, hold.thread_id, hold.since_seq, hold.state,
                 hold.retry_at, hold.error_type, hold.error, hold.detail, hold.failed_at)


def write_hold_failed(storage: Storage, hold: Hold) -> None:
    """Count one more failure of ``hold`` (its new state, retry and error)."""
    storage.exec(_FAILED, hold.state, hold.retry_at, hold.error_type, hold.error, hold.detail,
                 hold.failed_at, hold.name, hold.thread_id)


def advance_hold(storage: Storage, hold: Hold, since_seq: int) -> int:
    """Move ``hold`` past a delivered batch (compare-and-set); the rows changed."""
    return storage.exec(_ADVANCED, since_seq, hold.name, hold.thread_id, hold.since_seq).changed


def release_hold(storage: Storage, hold: Hold) -> int:
    """Delete ``hold``, its records all delivered (compare-and-set); the rows changed."""
    return storage.exec(_RELEASED, hold.name, hold.thread_id, hold.since_seq).changed


def drop_holds(storage: Storage, name: str) -> None:
    """Delete every hold of subscriber ``name`` (it starts over, or is gone)."""
    storage.exec(_DROP_ALL, name)


def resume_holds(storage: Storage, name: str) -> int:
    """Make every hold of ``name`` due now, its failures started over; the holds changed."""
    return storage.exec(_RESUMED, name).changed


def unpark_hold(storage: Storage, hold: Hold) -> int:
    """Make the parked ``hold`` due now, its failures started over; the rows changed."""
    return storage.exec(_UNPARKED, hold.name, hold.thread_id).changed


def skip_in_hold(storage: Storage, hold: Hold, past_seq: int) -> int:
    """Move ``hold`` past the record at ``past_seq`` and make it due now (compare-and-set on
    where it stood); the rows changed."""
    return storage.exec(_SKIPPED, past_seq + 1, hold.name, hold.thread_id,
                        hold.since_seq).changed


def first_owed(
    storage: Storage, hold: Hold, kinds: Container[str] | None, *, limit: int = 1_000
) -> Record | None:
    """The first record of ``kinds`` (None: every kind) that ``hold`` owes (what an operator's
    skip names), reading at most ``limit`` of its Thread's records; None when none is found."""
    seq, read = hold.since_seq, 0
    while read < limit:
        page = thread_page(storage, hold.thread_id, seq, 100)
        for _, record in page:
            if kinds is None or record.kind in kinds:
                return record
        if len(page) < 100:
            return None
        read += len(page)
        seq = page[-1][1].seq + 1
    return None


def mark_hold_reported(storage: Storage, hold: Hold) -> int:
    """Mark the parking of ``hold`` reported; 1 when this call took the report."""
    return storage.exec(_REPORTED, hold.name, hold.thread_id).changed


def thread_page(
    storage: Storage, thread_id: str, since_seq: int, limit: int
) -> list[tuple[int, Record]]:
    """Up to ``limit`` records of ``thread_id`` from ``since_seq`` on, in log order, each with
    its position."""
    return [(int(row["pos"]), Record(
        thread_id=str(row["thread_id"]), seq=int(row["seq"]), record_id=str(row["record_id"]),
        submission_id=row["submission_id"], kind=str(row["kind"]),
        body=decode_json(str(row["body_json"])), created_at=int(row["created_at"]),
    )) for row in storage.exec(_THREAD_PAGE, thread_id, since_seq, limit)]


def wanted_past(
    storage: Storage, thread_id: str, position: int, kinds: Container[str] | None
) -> bool:
    """Whether ``thread_id`` has a record of ``kinds`` (None: every kind) past ``position``,
    read from the end of its log: its newest row, and when that lies past ``position`` and
    only some kinds are wanted, the records past it up to :data:`LOOKBACK` (more than that
    past it counts as a wanted one)."""
    newest = storage.exec(_NEWEST_OF_THREAD, thread_id, 1).first()
    if newest is None or int(newest["pos"]) <= position:
        return False  # the common case: one row, the Thread's newest
    if kinds is None:
        return True
    limit = LOOKBACK + 1
    rows = storage.exec(_NEWEST_OF_THREAD, thread_id, limit).rows
    for row in rows:
        if int(row["pos"]) <= position:
            return False
        if kinds is None or str(row["kind"]) in kinds:
            return True
    return len(rows) == limit


__all__ = [
    "BACKING_OFF",
    "LOOKBACK",
    "PARKED",
    "Hold",
    "advance_hold",
    "drop_holds",
    "first_owed",
    "insert_hold",
    "mark_hold_reported",
    "read_holds",
    "release_hold",
    "resume_holds",
    "skip_in_hold",
    "thread_page",
    "unpark_hold",
    "wanted_past",
    "write_hold_failed",
]
