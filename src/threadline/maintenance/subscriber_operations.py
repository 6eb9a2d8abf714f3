"""What an operator does, without a deploy, to a subscriber or a lane that stopped.

A parking ends with a deploy that bumps the subscriber's ``version``, which replays the whole
log: a subscriber parked on a record its destination can never take (a queue message over the
Queue's size limit) parks on the same record again after every bump. These operations end it
in place (``/v1/spaces/{space}/subscribers/{name}/...`` and ``/lanes/{lane}/retry``):

* **resume**: a parked or backing-off subscriber delivers again from its cursor, its parking
  and its failure streak cleared.
* **skip**: the cursor moves past exactly one record, the first the subscriber wants past its
  cursor (the record its last batch began with), with a compare-and-set on the cursor the
  operator read: a duplicate or stale request changes nothing. The skip is appended to that
  record's Thread log as a ``subscriber.skipped`` record naming who did it, then the
  subscriber resumes.
* **restart**: the cursor is set to a given position of the log (0 to its end), the parking
  and failures cleared: a replay from there, or a jump ahead.
* **a required subscriber** fails per Thread (its holds,
  :mod:`~threadline.maintenance.required_gate`): resume makes every hold due now, a skip names
  the first record a hold owes (``record_id``; the hold's position, not the cursor, is then
  the compare-and-set) and moves that hold past it, a restart drops the holds (their records
  are the cursor's again, from the position).
* **retry a lane**: a parked lane of the due queue (``threadline:messages``, a host lane, a
  schedule's) is due now with its retry budget refilled.

Each is one gate transaction: the row's change, the lanes it feeds and the alarm commit
together, or nothing does. A subscriber's change is progress for the publication lane (and for
native work when the subscriber is required: the Threads it held may go on), so the alarm is
armed by now + min_delay. Every refusal (unknown name, nothing to resume, a stale cursor, a
position outside the log) is raised before anything is written, and checked again inside the
transaction, where a refusal rolls back whatever the transaction wrote.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from threadline.clock import Clock
from threadline.errors import Conflict, NotFound, ValidationFailed
from threadline.maintenance.publication_lane import Publication
from threadline.maintenance.required_gate import (
    Hold,
    drop_holds,
    first_owed,
    resume_holds,
    skip_in_hold,
)
from threadline.maintenance.subscriber_cursors import (
    SubscriberRow,
    log_end,
    position_of,
    read_rows,
)
from threadline.scheduling import NATIVE, PUBLICATION, DueQueue, LaneState
from threadline.storage.port import Row, Storage
from threadline.threads.history import append_history
from threadline.threads.model import encode_json
from threadline.threads.ports import MutationGate, commit_fact
from threadline.threads.records import SUBSCRIBER_SKIPPED, Record

_logger = logging.getLogger("threadline.maintenance")

# The cursor moved (or kept, to resume) with a compare-and-set on the one read: an operator
# action, a delivered batch or a redeploy that moved it first makes this one change nothing.
# The delivered count stays: it counts batches since the version started.
_MOVE = (
    "UPDATE tl_subscribers SET cursor = ?, state = 'active', failures = 0, retry_at = NULL,"
    " error_type = NULL, error = NULL, detail = NULL, failed_at = NULL, reported = 0"
    " WHERE name = ? AND version = ? AND cursor = ?"
)
# Control columns only: the record's body is never read to find it.
_PAGE_PAST = (
    "SELECT pos, thread_id, seq, record_id, submission_id, kind FROM tl_history"
    " WHERE pos > ? ORDER BY pos LIMIT ?"
)
#: Records read per page while looking for the first one a subscriber wants.
_PAGE = 200


def _skipped(
    name: str, record_id: str, seq: int, kind: str, position: int, submission_id: Any
) -> dict[str, Any]:
    skipped: dict[str, Any] = {"subscriber": name, "record_id": record_id, "seq": seq,
                               "kind": kind, "position": position}
    if submission_id is not None:
        skipped["submission_id"] = str(submission_id)
    return skipped


def _stopped(row: SubscriberRow) -> bool:
    """Parked, or backing off after a failed delivery: what resume and skip act on."""
    return row.parked or row.failures > 0


class SubscriberOperations:
    """The operator's actions on the declared subscribers and on parked lanes."""

    def __init__(
        self,
        storage: Storage,
        gate: MutationGate,
        clock: Clock,
        publication: Publication,
        queue: DueQueue,
    ) -> None:
        self._storage = storage
        self._gate = gate
        self._clock = clock
        self._publication = publication
        self._queue = queue

    # -- subscribers -----------------------------------------------------------------------

    def resume(self, name: str, *, subject: str | None) -> dict[str, Any]:
        """Deliver again from the cursor: the parking and the failure streak cleared.

        :class:`NotFound` for a subscriber this deployment does not declare, :class:`Conflict`
        for one that is neither parked nor backing off (a repeated resume changes nothing).
        """
        row = self._row(name)
        holds = self._publication.holds(name)
        if not _stopped(row) and not holds:
            raise Conflict(f"subscriber {name!r} is not parked or backing off: nothing to"
                           " resume", field="subscriber")
        self._commit(row, row.cursor, also=(lambda: resume_holds(self._storage, name))
                     if holds else None)
        _logger.warning("threadline: subscriber %r resumed at position %d by %s", name,
                        row.cursor, subject or "an unnamed principal")
        return self.view(name)

    def skip(
        self, name: str, *, cursor: int, record_id: str | None, subject: str | None
    ) -> dict[str, Any]:
        """Move past the one record at the cursor, if the cursor is still ``cursor``.

        The skipped record is the first the subscriber wants past its cursor; ``record_id``,
        when given, must be its id. A ``subscriber.skipped`` record naming it and ``subject``
        (``skipped_by``) is appended to its Thread's log in the same transaction, and the
        subscriber resumes. :class:`Conflict` when the cursor is elsewhere (a duplicate or a
        stale request), the subscriber is neither parked nor backing off, no record waits,
        or ``record_id`` names another record.
        """
        row = self._row(name)
        held = self._held_at(name, record_id)
        if held is not None:
            return self._skip_held(row, held, subject=subject)
        if row.cursor != cursor:
            raise Conflict(f"subscriber {name!r} is at position {row.cursor}, not {cursor}:"
                           " nothing was skipped", field="cursor", current=row.cursor)
        if not _stopped(row):
            holds = sorted(self._publication.holds(name))
            hint = (f"; it is held on thread(s) {', '.join(holds[:10])}: name the record a"
                    " hold owes (record_id)" if holds else "")
            raise Conflict(f"subscriber {name!r} is not parked or backing off: nothing to"
                           f" skip{hint}", field="subscriber")
        found = self._record_at(name, row.cursor)
        if found is None:
            raise Conflict(f"subscriber {name!r} has no record past position {row.cursor}",
                           field="cursor")
        if record_id is not None and str(found["record_id"]) != record_id:
            raise Conflict(f"the record at the cursor of subscriber {name!r} is"
                           f" {found['record_id']!r}, not {record_id!r}", field="record_id",
                           at_cursor=str(found["record_id"]))
        position = int(found["pos"])
        skipped = _skipped(name, str(found["record_id"]), int(found["seq"]), str(found["kind"]),
                           position, found["submission_id"])
        thread_id = str(found["thread_id"])
        self._commit(row, position, also=self._append_skip(thread_id, skipped, subject),
                     thread=thread_id)
        return self._skipped_view(name, thread_id, skipped, subject)

    def _held_at(self, name: str, record_id: str | None) -> tuple[Hold, Record] | None:
        """The hold of ``name`` whose first owed record is ``record_id``, with that record."""
        spec = self._publication.spec(name)
        if record_id is None or spec is None:
            return None
        for hold in self._publication.holds(name).values():
            owed = first_owed(self._storage, hold, spec.kinds)
            if owed is not None and owed.record_id == record_id:
                return hold, owed
        return None

    def _skip_held(
        self, row: SubscriberRow, held: tuple[Hold, Record], *, subject: str | None
    ) -> dict[str, Any]:
        """Skip the first record a hold owes: the hold moves past it (compare-and-set on where
        it stood) and is tried again at once; the cursor stays."""
        hold, record = held
        position = position_of(self._storage, record)
        skipped = _skipped(row.name, record.record_id, record.seq, record.kind, position,
                           record.submission_id)
        append = self._append_skip(record.thread_id, skipped, subject)

        def also() -> None:
            if skip_in_hold(self._storage, hold, record.seq) != 1:
                raise Conflict(f"subscriber {row.name!r} moved on thread {hold.thread_id!r}"
                               " while the request was answered: nothing was skipped",
                               field="record_id")
            append()

        self._commit(row, row.cursor, also=also, thread=record.thread_id)
        return self._skipped_view(row.name, record.thread_id, skipped, subject)

    def _append_skip(
        self, thread_id: str, skipped: dict[str, Any], subject: str | None
    ) -> Callable[[], None]:
        body = dict(skipped) if subject is None else {**skipped, "skipped_by": subject}

        def append() -> None:
            end = log_end(self._storage)
            append_history(
                self._storage,
                record_id=f"{skipped['subscriber']}:skipped:{skipped['record_id']}:{end}",
                thread_id=thread_id, submission_id=None, kind=SUBSCRIBER_SKIPPED,
                body_json=encode_json(body), now=self._clock.now_ms(),
            )

        return append

    def _skipped_view(
        self, name: str, thread_id: str, skipped: dict[str, Any], subject: str | None
    ) -> dict[str, Any]:
        _logger.warning("threadline: subscriber %r skipped record %s (thread %s, seq %d) by %s",
                        name, skipped["record_id"], thread_id, skipped["seq"],
                        subject or "an unnamed principal")
        return {"subscriber": self.view(name), "skipped": {**skipped, "thread_id": thread_id}}

    def restart(self, name: str, *, position: int, subject: str | None) -> dict[str, Any]:
        """Deliver from ``position`` of the log (0: its beginning), failures and parking
        cleared. Restarting at the same position again changes nothing more.

        :class:`NotFound` for an undeclared subscriber; :class:`ValidationFailed` (422) for a
        position outside 0 to the log's end.
        """
        row = self._row(name)
        end = log_end(self._storage)
        if not 0 <= position <= end:
            raise ValidationFailed(f"position must be from 0 to the log's end, {end}",
                                   field="position", log_end=end)
        holds = self._publication.holds(name)
        if position == row.cursor and not _stopped(row) and not holds:
            return self.view(name)
        # A restart replays (or jumps) from ``position`` for every Thread: what the holds owed
        # is the cursor's again.
        self._commit(row, position, also=(lambda: drop_holds(self._storage, name))
                     if holds else None)
        _logger.warning("threadline: subscriber %r restarted at position %d (from %d) by %s",
                        name, position, row.cursor, subject or "an unnamed principal")
        return self.view(name)

    def view(self, name: str) -> dict[str, Any]:
        """What ``/maintenance`` shows of subscriber ``name``."""
        for item in self._publication.readout():
            if item["name"] == name:
                return item
        raise NotFound(f"no subscriber {name!r} is declared in this deployment",
                       field="subscriber")

    def _row(self, name: str) -> SubscriberRow:
        if self._publication.spec(name) is None:
            raise NotFound(f"no subscriber {name!r} is declared in this deployment",
                           field="subscriber")
        row = read_rows(self._storage).get(name)
        if row is None:
            # Declared, its row not written yet (a start lost before it): the pass writes it.
            self._publication.rows()
            row = read_rows(self._storage).get(name)
        if row is None:
            raise NotFound(f"subscriber {name!r} has no cursor yet", field="subscriber")
        return row

    def _record_at(self, name: str, cursor: int) -> Row | None:
        """The first record past ``cursor`` that ``name`` wants (None: the log ends first)."""
        spec = self._publication.spec(name)
        after = cursor
        while True:
            rows = self._storage.exec(_PAGE_PAST, after, _PAGE).rows
            for item in rows:
                if spec is None or spec.wants(str(item["kind"])):
                    return item
            if len(rows) < _PAGE:
                return None
            after = int(rows[-1]["pos"])

    def _commit(
        self,
        row: SubscriberRow,
        cursor: int,
        *,
        also: Callable[[], object] | None = None,
        thread: str | None = None,
    ) -> None:
        """Move ``row``'s cursor to ``cursor`` (compare-and-set on the one read), clear its
        parking and failures, and run ``also`` in the same gate transaction."""
        spec = self._publication.spec(row.name)
        lanes = (PUBLICATION, NATIVE) if spec is not None and spec.required else (PUBLICATION,)

        def write() -> None:
            changed = self._storage.exec(
                _MOVE, cursor, row.name, row.version, row.cursor).changed
            if changed != 1:
                raise Conflict(f"subscriber {row.name!r} moved while the request was"
                               " answered: nothing was changed", field="subscriber")
            if also is not None:
                also()

        try:
            commit_fact(self._gate, write, lanes, thread=thread)
        finally:
            # Whatever happened, the pass reads the row again rather than trust its copy.
            self._publication.reread(row.name)

    # -- lanes -----------------------------------------------------------------------------

    def retry_lane(self, lane_id: str, *, subject: str | None) -> dict[str, Any]:
        """Make the parked lane ``lane_id`` due now, its retry budget refilled.

        :class:`NotFound` for a lane the due queue has no row of; :class:`Conflict` for one
        that is not parked (a repeated retry changes nothing).
        """
        lane = self._queue.get(lane_id)
        if lane is None:
            raise NotFound(f"no lane {lane_id!r} in the due queue", field="lane")
        if lane.state is not LaneState.PARKED or lane_id == NATIVE:
            raise Conflict(f"lane {lane_id!r} is {lane.state.value}, not parked: nothing to"
                           " retry", field="lane")

        def write() -> None:
            current = self._queue.get(lane_id)
            if current is None or current.state is not LaneState.PARKED:
                raise Conflict(f"lane {lane_id!r} changed while the request was answered:"
                               " nothing was changed", field="lane")
            self._gate.schedule_fact(lane_id, self._clock.now_ms())

        self._gate.mutate(write, invalidates_recovery=False)
        self._queue.release(lane_id)
        _logger.warning("threadline: parked lane %r retried by %s", lane_id,
                        subject or "an unnamed principal")
        after = self._queue.get(lane_id)
        assert after is not None
        return {"id": after.id, "state": after.state.value, "due_at": after.due_at,
                "not_before": after.not_before, "stalls": after.stalls,
                "revision": after.revision, "reported": after.reported, "cursor": after.cursor}


__all__ = ["SubscriberOperations"]
