"""The ``threadline:retention`` lane: settled work older than ``retention_ms`` is deleted.

Off by default (``RuntimeConfig.retention_ms`` None: everything is kept, so an upgrade deletes
nothing). When it is set, each wave deletes, Thread by Thread, a **prefix** of the Thread's log
(``tl_history``) and the submissions whose settlement record went with it, together with their
journal, waits, abort intents and sent messages. A Thread's kept records are therefore always
its seqs from some ``first kept`` on, without a hole, and a reader that asks for older ones is
told where the kept ones start (``event: horizon`` on the stream, ``first_kept`` in a history
page), never handed a silent gap.

A record is deleted only when all of these hold, and with it every record before it in its
Thread:

* it is at least the retention old (``created_at <= now - retention_ms``);
* every subscriber has consumed it (its position is at or below every cursor of
  ``tl_subscribers``; a parked or backfilling subscriber holds retention back);
* it is not its Thread's newest record (the next seq is read from the end of the log, and so
  the space's highest ``pos`` is never deleted: a rowid is never handed out twice), and it
  does not belong to an open submission (its records follow its first claim,
  ``history_from``; an Attempt replayed finds its records there);
* if it is a ``submission.settled`` record, its submission can go too: it is not its Thread's
  newest submission (the next FIFO seq is read from the end of ``tl_submissions``) and no
  message it sent is still pending (a refusal still appends ``message.failed`` for it).

A submission goes in the transaction that deletes its settlement record, which is its last
record, so nothing of it is left without the rest. Its idempotency key goes with it: a key is
remembered for as long as its submission is kept, at least ``retention_ms`` after it settled.
A submission settled before the log carried settlement records has none and is kept.

**Waves.** A wave reads the oldest records of the space (by ``pos``) a page at a time and
prunes each Thread it meets once, in transactions of at most :data:`PRUNE_BATCH` records, each
reporting the wave's progress; it stops at the first record that is young enough to keep (the
lane is next due when that one expires, and no sooner than :data:`WAVE_INTERVAL_MS`: waves are
hourly at most), at the first one a subscriber still has to consume (due again in
:data:`WAVE_INTERVAL_MS`), or once it deleted :data:`WAVE_RECORDS` records or ran out of time
(due again at once). A wave reads again, each time, the old records retention keeps (a Thread's
newest, an open submission's): one or two rows per Thread idle past the retention. A wave lost
with the object deleted whole Threads' prefixes or nothing of them; the next one goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.maintenance.lane_wave import current_wave
from threadline.maintenance.subscriber_cursors import read_rows
from threadline.scheduling import RETENTION, DueQueue, MutationGate
from threadline.scheduling.failpoints import Failpoints
from threadline.storage.port import Storage, chunked
from threadline.threads.records import SUBMISSION_SETTLED

#: Records one transaction deletes at most (with the submissions they settle).
PRUNE_BATCH = 500
#: Records one wave deletes at most before it lets the lane be due again at once.
WAVE_RECORDS = 5_000
#: Oldest records read by the first page of a wave's scan, and by its largest pages.
FIRST_SCAN_PAGE = 8
SCAN_PAGE = 256
#: The shortest time between two waves, and the retry of one a subscriber held back.
WAVE_INTERVAL_MS = 3_600_000
#: The bound of one wave.
RETENTION_DISPATCH_TIMEOUT_MS = 30_000

_OLDEST = (
    "SELECT pos, thread_id, created_at FROM tl_history WHERE pos > ? ORDER BY pos LIMIT ?"
)
_NEWEST_RECORD = "SELECT seq FROM tl_history WHERE thread_id = ? ORDER BY seq DESC LIMIT 1"
_NEWEST_SUBMISSION = (
    "SELECT id FROM tl_submissions WHERE thread_id = ? ORDER BY seq DESC LIMIT 1"
)
# Through the open-work index (dormant, thread_id, seq) WHERE settled_at IS NULL: one Thread's
# open submissions are two seeks. One never claimed has no record yet (NULL history_from).
_OPEN_FLOOR = (
    "SELECT MIN(history_from) AS floor FROM tl_submissions WHERE dormant IN (0, 1)"
    " AND thread_id = ? AND settled_at IS NULL"
)
_PREFIX = (
    "SELECT seq, pos, kind, submission_id, created_at FROM tl_history"
    " WHERE thread_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?"
)
# A submission's messages are a range of the primary key: their ids start with its own.
_PENDING_SENT = (
    "SELECT 1 AS pending FROM tl_messages WHERE id > ? AND id < ? AND state = 'pending' LIMIT 1"
)
_DELETE_RECORDS = "DELETE FROM tl_history WHERE thread_id = ? AND seq <= ?"
_DELETE_SENT = "DELETE FROM tl_messages WHERE id > ? AND id < ? AND state <> 'pending'"


def _in(sql: str, count: int) -> str:
    return sql.format(", ".join("?" * count))


# Children first: tl_journal, tl_waits and tl_abort_intents keep foreign keys to the row.
_DELETE_CHILDREN = (
    "DELETE FROM tl_journal WHERE submission_id IN ({})",
    "DELETE FROM tl_waits WHERE submission_id IN ({})",
    "DELETE FROM tl_abort_intents WHERE submission_id IN ({})",
)
_DELETE_SUBMISSIONS = "DELETE FROM tl_submissions WHERE id IN ({}) AND settled_at IS NOT NULL"


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one transaction deleted from one Thread."""

    records: int
    submissions: int
    #: Whether the Thread may have more to delete (the batch was full).
    more: bool


def _sent_range(submission_id: str) -> tuple[str, str]:
    # Ids are "<submission>:<key>": every one sorts above "<submission>:" and below
    # "<submission>;" (";" follows ":").
    return submission_id + ":", submission_id + ";"


def subscriber_horizon(storage: Storage) -> int | None:
    """The lowest subscriber cursor: positions at or below it were consumed by every
    subscriber (None: no subscriber holds anything back)."""
    cursors = [row.cursor for row in read_rows(storage).values()]
    return min(cursors) if cursors else None


def prune_thread(storage: Storage, thread_id: str, cutoff: int, *, limit: int = PRUNE_BATCH,
                 failpoints: Failpoints | None = None) -> Pruned:
    """Delete the prefix of ``thread_id`` that retention may delete at ``cutoff`` (records
    created at or before it), at most ``limit`` records, in the caller's transaction."""
    newest = storage.exec(_NEWEST_RECORD, thread_id).first()
    if newest is None:
        return Pruned(0, 0, False)
    bound = int(newest["seq"]) - 1
    floor = storage.exec(_OPEN_FLOOR, thread_id).one()["floor"]
    if floor is not None:
        bound = min(bound, int(floor))
    if bound < 1:
        return Pruned(0, 0, False)
    horizon = subscriber_horizon(storage)
    last_submission = storage.exec(_NEWEST_SUBMISSION, thread_id).first()
    keep = None if last_submission is None else str(last_submission["id"])
    through = 0
    deleted = 0
    settled: list[str] = []
    page = FIRST_SCAN_PAGE
    stopped = False
    # Pages growing from a few rows: in the steady state only the first few have expired.
    while not stopped and deleted < limit and through < bound:
        rows = storage.exec(_PREFIX, thread_id, through, bound, min(page, limit - deleted)).rows
        page *= 4
        if not rows:
            break
        for row in rows:
            if int(row["created_at"]) > cutoff or (
                    horizon is not None and int(row["pos"]) > horizon):
                stopped = True
                break
            submission_id = row["submission_id"]
            if str(row["kind"]) == SUBMISSION_SETTLED and submission_id is not None:
                sid = str(submission_id)
                if sid == keep or storage.exec(_PENDING_SENT, *_sent_range(sid)).first():
                    stopped = True
                    break
                settled.append(sid)
            through = int(row["seq"])
            deleted += 1
    if not deleted:
        return Pruned(0, 0, False)
    storage.exec(_DELETE_RECORDS, thread_id, through)
    if failpoints is not None:
        failpoints.hit("retention:prune:deleting")
    _delete_submissions(storage, settled)
    return Pruned(deleted, len(settled), not stopped and deleted == limit)


def _delete_submissions(storage: Storage, ids: Sequence[str]) -> None:
    for sid in ids:
        storage.exec(_DELETE_SENT, *_sent_range(sid))
    for part in chunked(ids):
        for sql in _DELETE_CHILDREN:
            storage.exec(_in(sql, len(part)), *part)
        storage.exec(_in(_DELETE_SUBMISSIONS, len(part)), *part)


@dataclass
class WaveTally:
    """What the last wave did (for the figures and for operators)."""

    records: int = 0
    submissions: int = 0
    threads: int = 0


class Retention:
    """The handler of the ``threadline:retention`` lane, over one incarnation's storage."""

    def __init__(self, storage: Storage, gate: MutationGate, queue: DueQueue, clock: Clock,
                 config: RuntimeConfig, failpoints: Failpoints) -> None:
        self._storage = storage
        self._gate = gate
        self._queue = queue
        self._clock = clock
        self._retention = config.retention_ms
        self._failpoints = failpoints
        #: What the last wave deleted.
        self.last_wave = WaveTally()

    @property
    def enabled(self) -> bool:
        """Whether this deployment deletes anything."""
        return self._retention is not None

    def start(self) -> None:
        """At start-up: with retention on, make sure its lane is enrolled (one row read; a
        write only the first time, or after a deploy turned retention on)."""
        if self._retention is None:
            return
        lane = self._queue.get(RETENTION)
        if lane is not None and lane.due_at is not None:
            return
        now = self._clock.now_ms()
        self._storage.transaction(lambda: self._gate.schedule_fact(RETENTION, now))

    async def run_lane(self, now: int, deadline: int) -> int | None:
        """One wave: delete what retention allows, oldest first; return when the lane is next
        due (None: retention is off)."""
        del now  # each step reads the clock: the cutoff follows the wave's own time
        retention = self._retention
        if retention is None:
            return None
        tally = WaveTally()
        self.last_wave = tally
        seen: set[str] = set()
        scan = 0
        page = FIRST_SCAN_PAGE
        while True:
            at = self._clock.now_ms()
            if at >= deadline or tally.records >= WAVE_RECORDS:
                return at
            rows = self._storage.exec(_OLDEST, scan, page).rows
            # The first page is small: in the steady state its first record is young already.
            page = min(page * 4, SCAN_PAGE)
            if not rows:
                # Whatever is appended from now on expires no earlier than a retention away.
                return self._done(at + retention)
            cutoff = at - retention
            horizon = subscriber_horizon(self._storage)
            for row in rows:
                created = int(row["created_at"])
                if created > cutoff:
                    return self._done(max(created + retention, at + WAVE_INTERVAL_MS))
                if horizon is not None and int(row["pos"]) > horizon:
                    return self._done(at + WAVE_INTERVAL_MS)
                scan = int(row["pos"])
                thread_id = str(row["thread_id"])
                if thread_id in seen:
                    continue
                seen.add(thread_id)
                tally.threads += 1
                await self._prune(thread_id, cutoff, tally, deadline)
                if self._clock.now_ms() >= deadline or tally.records >= WAVE_RECORDS:
                    break

    def _done(self, next_due: int) -> int:
        """The wave did all there was to do: that is progress, even when nothing was old
        enough to delete (a wave that finds nothing never counts toward parking)."""
        wave = current_wave()
        if wave is not None:
            self._storage.transaction(wave.progress)
        return next_due

    async def _prune(self, thread_id: str, cutoff: int, tally: WaveTally, deadline: int) -> None:
        """Delete the Thread's deletable prefix, a batch per transaction."""
        wave = current_wave()
        while True:
            await self._failpoints.reached("retention:prune:before")

            def step() -> Pruned:
                pruned = prune_thread(self._storage, thread_id, cutoff, limit=PRUNE_BATCH,
                                      failpoints=self._failpoints)
                if pruned.records and wave is not None:
                    wave.progress()
                return pruned

            pruned = self._storage.transaction(step)
            if not pruned.records:
                return
            tally.records += pruned.records
            tally.submissions += pruned.submissions
            await self._failpoints.reached("retention:prune:committed")
            if (not pruned.more or tally.records >= WAVE_RECORDS
                    or self._clock.now_ms() >= deadline):
                return
            # A turn for native work and the other waves before the next batch.
            await self._clock.sleep_until(self._clock.now_ms())


__all__ = [
    "FIRST_SCAN_PAGE",
    "PRUNE_BATCH",
    "RETENTION_DISPATCH_TIMEOUT_MS",
    "SCAN_PAGE",
    "WAVE_INTERVAL_MS",
    "WAVE_RECORDS",
    "Pruned",
    "Retention",
    "WaveTally",
    "prune_thread",
    "subscriber_horizon",
]
