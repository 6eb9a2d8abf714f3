"""The durable due queue: one ``tl_lanes`` row per maintenance lane.

A lane is a named stream of autonomous work (native Attempts, publication, host lanes, ...)
that the single alarm multiplexes. The queue, not the alarm slot, is the truth: the slot is
rewritten from :meth:`DueQueue.next` at every decision point.

Each row carries two fences:

* ``revision`` counts producer enrollments. A maintenance wave remembers the revision it
  claimed and may only complete the lane if nobody enrolled it since, so work that raced the
  wave stays due.
* ``stalls`` counts claims without progress. Each claim pushes ``due_at`` to a crash-fallback
  deadline (``not_before``, the retry floor); after ``park_after_stalls`` claims the lane is
  parked, retried at the hourly ceiling and reported once. Only real progress (a strictly newer
  source cursor, an explicit progress enrollment, or work a running wave moved forward) or an
  idle completion replenishes it.

Every method runs inside the caller's storage transaction, or as one statement of its own.

**Holds.** A lane whose row storage refuses to write (its claim, and the charge that would
back it off, both refused) cannot be moved to its backoff durably. The lane runner then
*holds* it in memory for this incarnation (:meth:`DueQueue.hold`): until then the lane is not
due (:meth:`DueQueue.due`) and counts as due no earlier than the hold (:meth:`DueQueue.next`,
which the alarm decisions read), so it cannot make the alarm fire at every minimum delay.
A hold floors that lane's own due time only; every other lane keeps its own. A new
incarnation starts without holds: the lane is tried again at once, then held again.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from enum import StrEnum

from threadline.config import RuntimeConfig
from threadline.errors import SchedulingError
from threadline.storage.port import Row, Storage

#: Reserved prefix of the lanes the framework owns.
RESERVED_PREFIX = "threadline:"
NATIVE = "threadline:native"
PUBLICATION = "threadline:publication"
PROJECTION = "threadline:projection"
MESSAGES = "threadline:messages"
RECOVERY_EVENTS = "threadline:recovery-events"
LIFECYCLE = "threadline:lifecycle"
#: Admits delayed submissions into their Threads' FIFO as they fall due.
DELAYED = "threadline:delayed"
#: Deletes settled work older than ``RuntimeConfig.retention_ms``, in bounded waves.
RETENTION = "threadline:retention"
FRAMEWORK_LANES: frozenset[str] = frozenset(
    {NATIVE, PUBLICATION, PROJECTION, MESSAGES, RECOVERY_EVENTS, LIFECYCLE, DELAYED, RETENTION}
)
#: A parked lane is retried at this ceiling (one hour) until it makes progress.
PARKED_RETRY_MS = 3_600_000

_HOST_LANE_ID = re.compile(r"[a-z0-9][a-z0-9._:-]{0,63}")

_SELECT_LANES = (
    "SELECT id, due_at, not_before, revision, stalls, state, reported, cursor FROM tl_lanes "
)
_SELECT = _SELECT_LANES + "WHERE id = ?"
_SELECT_ALL = _SELECT_LANES + "ORDER BY id"
_SELECT_DUE = (
    _SELECT_LANES + "WHERE due_at IS NOT NULL AND due_at <= ? ORDER BY due_at, id LIMIT ?"
)
_SELECT_NEXT = "SELECT due_at FROM tl_lanes WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1"
_SELECT_NEXT_HELD = (
    "SELECT id, due_at FROM tl_lanes WHERE due_at IS NOT NULL ORDER BY due_at LIMIT ?"
)
_SELECT_UNREPORTED = _SELECT_LANES + "WHERE state = 'parked' AND reported = 0 ORDER BY id"
_REGISTER = "INSERT INTO tl_lanes (id) VALUES (?) ON CONFLICT (id) DO NOTHING"
# Without progress the lane becomes due no later than it already was, and never earlier than
# its retry floor; a parked lane stays parked.
_DROP = "DELETE FROM tl_lanes WHERE id = ?"
_ENROLL = """
INSERT INTO tl_lanes (id, due_at, state, revision) VALUES (?, ?, 'due', 1)
ON CONFLICT (id) DO UPDATE SET
    due_at = CASE WHEN tl_lanes.due_at IS NULL THEN max(excluded.due_at, tl_lanes.not_before)
        ELSE min(tl_lanes.due_at, max(excluded.due_at, tl_lanes.not_before)) END,
    state = CASE WHEN tl_lanes.state = 'parked' THEN 'parked' ELSE 'due' END,
    revision = tl_lanes.revision + 1
"""
# The native lane is never claimed by a wave, so its revision fences nothing: an enrollment that
# would not make it due any earlier writes nothing (a lane row and its index entry saved).
_ENROLL_NATIVE = _ENROLL + """WHERE tl_lanes.due_at IS NULL
    OR tl_lanes.due_at > max(excluded.due_at, tl_lanes.not_before)
"""
# Progress is a new fact: the floor, the stall budget and the parked report all reset.
_ENROLL_PROGRESS = """
INSERT INTO tl_lanes (id, due_at, state, revision, cursor) VALUES (?, ?, 'due', 1, ?)
ON CONFLICT (id) DO UPDATE SET
    due_at = CASE WHEN tl_lanes.due_at IS NULL THEN excluded.due_at
        ELSE min(tl_lanes.due_at, excluded.due_at) END,
    state = 'due', not_before = 0, stalls = 0, reported = 0,
    cursor = max(tl_lanes.cursor, excluded.cursor),
    revision = tl_lanes.revision + 1
"""
# A lane's deadline replaced by its owner's new declaration: due exactly then, fresh budget.
_RESCHEDULE = """
INSERT INTO tl_lanes (id, due_at, state, revision) VALUES (?, ?, 'due', 1)
ON CONFLICT (id) DO UPDATE SET
    due_at = excluded.due_at, state = 'due', not_before = 0, stalls = 0, reported = 0,
    revision = tl_lanes.revision + 1
"""
# Native progress when the native lane is already due by then with its budget full: only the
# revision would change, and no wave fences on it (a burst of admissions writes it once).
_ENROLL_PROGRESS_NATIVE = _ENROLL_PROGRESS + """WHERE tl_lanes.due_at IS NULL
    OR tl_lanes.due_at > excluded.due_at OR tl_lanes.state <> 'due' OR tl_lanes.not_before <> 0
    OR tl_lanes.stalls <> 0 OR tl_lanes.reported <> 0 OR tl_lanes.cursor < excluded.cursor
"""
# A lane that was already parked keeps its stored report flag: the snapshot's copy may predate
# take_parked_reports, and clearing it would report the same parking twice.
_CLAIM = """
UPDATE tl_lanes SET due_at = ?, not_before = ?, stalls = ?, state = ?,
    reported = CASE WHEN state = 'parked' AND ? = 'parked' THEN reported ELSE 0 END
WHERE id = ? AND revision = ? AND stalls = ? AND due_at IS NOT NULL
RETURNING reported
"""
_MAKE_IDLE = """
UPDATE tl_lanes SET due_at = NULL, not_before = 0, stalls = 0, state = 'idle', reported = 0
WHERE id = ?
"""
_COMPLETE_IDLE = _MAKE_IDLE + " AND revision = ?"
# A parked lane keeps its hourly floor even when its wave names an earlier deadline.
_COMPLETE_DUE = """
UPDATE tl_lanes SET
    due_at = CASE WHEN state = 'parked' THEN max(?, not_before) ELSE ? END,
    not_before = CASE WHEN state = 'parked' THEN max(?, not_before) ELSE ? END
WHERE id = ? AND revision = ? AND due_at IS NOT NULL
"""
# A deadline fixed before the wave ran (a schedule's next fire time) holds whatever the wave's
# outcome: neither a backoff nor a parking postpones the lane past it. Only ever earlier, and
# the revision is kept: it is the lane's own deadline, not new work racing a wave.
_BRING_FORWARD = """
UPDATE tl_lanes SET due_at = min(due_at, ?), not_before = min(not_before, ?)
WHERE id = ? AND due_at IS NOT NULL AND (due_at > ? OR not_before > ?)
"""
# The running wave moved work forward: the stall budget refills, a parking ends with its report,
# and the crash fallback comes no later than the given one. Nothing is written when the lane
# already is so (the later progress of the same wave).
_REPLENISH = """
UPDATE tl_lanes SET stalls = 0, state = 'due', reported = 0,
    due_at = min(due_at, ?), not_before = min(not_before, ?)
WHERE id = ? AND due_at IS NOT NULL
    AND (stalls <> 0 OR state <> 'due' OR reported <> 0 OR due_at > ? OR not_before > ?)
"""
# Only ``due_at``: a deferral is neither a claim (no stall charged, no retry floor) nor an
# enrollment (no revision), so a producer still makes the lane due earlier, and a wave's fence
# still holds.
_DEFER = "UPDATE tl_lanes SET due_at = ? WHERE due_at IS NOT NULL AND due_at < ?"
_MARK_REPORTED = """
UPDATE tl_lanes SET reported = 1 WHERE id = ? AND state = 'parked' AND reported = 0
"""
# The native lane as a pass decides it; no write when it already is so.
_CHECKPOINT_DUE = """
UPDATE tl_lanes SET due_at = ?, not_before = 0,
    state = CASE WHEN state = 'parked' THEN 'parked' ELSE 'due' END
WHERE id = ? AND (due_at IS NOT ? OR not_before <> 0 OR state = 'idle')
"""
_CHECKPOINT_IDLE = _MAKE_IDLE + " AND (due_at IS NOT NULL OR not_before <> 0 OR stalls <> 0" \
    " OR reported <> 0)"


def validate_host_lane_id(lane_id: str) -> str:
    """Return ``lane_id`` if an application may use it as a host lane, else raise.

    Host lane ids match ``[a-z0-9][a-z0-9._:-]{0,63}`` and must not start with the reserved
    ``threadline:`` prefix. Raises :class:`SchedulingError`.
    """
    if not isinstance(lane_id, str) or _HOST_LANE_ID.fullmatch(lane_id) is None:
        raise SchedulingError(f"invalid lane id {lane_id!r}: expected [a-z0-9][a-z0-9._:-]{{0,63}}")
    if lane_id.startswith(RESERVED_PREFIX):
        raise SchedulingError(f"lane id {lane_id!r} uses the reserved prefix {RESERVED_PREFIX!r}")
    return lane_id


def validate_lane_id(lane_id: str) -> str:
    """Return ``lane_id`` if it is a framework lane or a valid host lane id, else raise."""
    return lane_id if lane_id in FRAMEWORK_LANES else validate_host_lane_id(lane_id)


class LaneState(StrEnum):
    """Scheduling state of a lane, mirrored by the ``tl_lanes.state`` CHECK constraint."""

    IDLE = "idle"
    DUE = "due"
    PARKED = "parked"


@dataclass(frozen=True, slots=True)
class Lane:
    """A snapshot of one ``tl_lanes`` row; the fences of a later claim or completion."""

    id: str
    due_at: int | None
    not_before: int
    revision: int
    stalls: int
    state: LaneState
    reported: bool
    cursor: int

    @classmethod
    def from_row(cls, row: Row) -> Lane:
        """Build a lane from a ``tl_lanes`` row."""
        due = row["due_at"]
        return cls(
            id=str(row["id"]),
            due_at=None if due is None else int(due),
            not_before=int(row["not_before"]),
            revision=int(row["revision"]),
            stalls=int(row["stalls"]),
            state=LaneState(row["state"]),
            reported=bool(row["reported"]),
            cursor=int(row["cursor"]),
        )


def backoff_ms(stalls: int, config: RuntimeConfig, rng: random.Random) -> int:
    """The retry delay after ``stalls`` charged attempts without progress.

    ``b = min(cap, base * 2**min(stalls, 30))``; the result is spread uniformly over
    ``[ceil(b/2), b]`` by ``rng`` so that retries of many objects do not align, and never
    exceeds the cap.
    """
    ceiling = min(
        config.alarm_backoff_cap_ms, config.alarm_backoff_base_ms << min(max(stalls, 0), 30)
    )
    half = ceiling / 2
    return min(ceiling, max(1, math.ceil(half + half * rng.random())))


class DueQueue:
    """Operations on ``tl_lanes``. Stateless apart from its collaborators: safe to rebuild."""

    def __init__(self, storage: Storage, config: RuntimeConfig, rng: random.Random) -> None:
        self._storage = storage
        self._config = config
        self._rng = rng
        #: In-memory count of enrollments of lanes other than native made through this
        #: queue (a hint: a pass compares it to learn that no such lane was enrolled).
        self.lane_enrollments = 0
        #: Lanes held in memory until an epoch ms (see the module docstring).
        self._holds: dict[str, int] = {}

    def hold(self, lane_id: str, until: int) -> None:
        """Count ``lane_id`` due no earlier than ``until`` in this incarnation (its row stays
        as it is): for a lane storage refuses to back off durably. Native is never held."""
        if lane_id == NATIVE:
            raise SchedulingError("the native lane is never held")
        self._holds[lane_id] = int(until)

    def release(self, lane_id: str) -> None:
        """End the hold of ``lane_id``, if any (storage wrote its row again)."""
        self._holds.pop(lane_id, None)

    def held_until(self, lane_id: str) -> int | None:
        """When the hold of ``lane_id`` ends (None: not held)."""
        return self._holds.get(lane_id)

    @property
    def holds(self) -> dict[str, int]:
        """Every hold of this incarnation: lane id to the epoch ms it ends (a copy)."""
        return dict(self._holds)

    def register(self, lane_id: str) -> None:
        """Ensure the lane's row exists (idle when new). Registering twice changes nothing."""
        self._storage.exec(_REGISTER, validate_lane_id(lane_id))

    def get(self, lane_id: str) -> Lane | None:
        """The lane's current row, or None when it was never registered or enrolled."""
        row = self._storage.exec(_SELECT, lane_id).first()
        return None if row is None else Lane.from_row(row)

    def lanes(self) -> list[Lane]:
        """Every lane, ordered by id (a full read; for reports and tests, not the hot path)."""
        return [Lane.from_row(row) for row in self._storage.exec(_SELECT_ALL)]

    def enroll(self, lane_id: str, due_at: int, *, progress: bool = False) -> bool:
        """Make the lane due no later than ``due_at`` and bump its revision.

        Without ``progress`` this is a hint or a crash fallback: it never moves the lane
        earlier than its retry floor and keeps a parked lane parked, so repeating it changes
        nothing but the revision. With ``progress`` a real new fact replenishes the lane: the
        floor, the stall budget and the parked report reset. The native lane, which no wave
        claims, keeps its revision when the enrollment would change nothing else (not make it
        due earlier, nor replenish it): nothing is written then, and without ``progress`` it
        returns False (every other enrollment returns True).
        """
        validate_lane_id(lane_id)
        if lane_id != NATIVE:
            self.lane_enrollments += 1
        if progress:
            self._storage.exec(_ENROLL_PROGRESS_NATIVE if lane_id == NATIVE else _ENROLL_PROGRESS,
                               lane_id, int(due_at), 0)
        elif lane_id == NATIVE:
            return self._storage.exec(_ENROLL_NATIVE, lane_id, int(due_at)).changed == 1
        else:
            self._storage.exec(_ENROLL, lane_id, int(due_at))
        return True

    def reschedule(self, lane_id: str, due_at: int) -> None:
        """Make the host lane ``lane_id`` due exactly at ``due_at``, with a fresh budget.

        For a lane whose every deadline its owner derives from a declaration that a deploy
        replaced (a schedule whose fire times changed): its former deadline, backoff, retry
        floor and parking belong to the old declaration. Bumps the revision, like any
        enrollment, so a wave that held the lane does not complete it over this.
        """
        if validate_lane_id(lane_id) == NATIVE:
            raise SchedulingError("the native lane's deadline is the pass's to decide")
        self.lane_enrollments += 1
        self._storage.exec(_RESCHEDULE, lane_id, int(due_at))

    def progress(self, lane_id: str, due_at: int, cursor: int) -> bool:
        """Enroll the lane for the source fact named by ``cursor``; True when it is progress.

        A strictly newer cursor than the one recorded is progress (see :meth:`enroll`); an
        equal or older one is a replayed notice and only enrolls without acceleration, so a
        redelivered hint can never reset the retry budget. Cursors name committed facts (a
        sequence number), never clocks or attempt counters.
        """
        if cursor < 0:
            raise SchedulingError(f"a progress cursor is >= 0, got {cursor}")
        current = self.get(lane_id)
        if cursor > (0 if current is None else current.cursor):
            validate_lane_id(lane_id)
            if lane_id != NATIVE:
                self.lane_enrollments += 1
            self._storage.exec(_ENROLL_PROGRESS, lane_id, int(due_at), int(cursor))
            return True
        self.enroll(lane_id, due_at)
        return False

    def claim(self, lane: Lane, now: int) -> Lane | None:
        """Charge one attempt on ``lane`` before running its wave; None when ``lane`` is stale.

        Compare-and-set on the snapshot's ``revision`` and ``stalls``: a producer enrollment or
        another claim since the snapshot makes this one a no-op, so a duplicate claim never
        charges twice. The charged lane is due again at the crash-fallback deadline (its new
        retry floor) in case the object is lost mid-wave; at ``park_after_stalls`` it is parked
        at the hourly ceiling with ``reported`` cleared when it newly parks; a lane already
        parked keeps its stored flag, so each parking is reported once.
        """
        if lane.due_at is None:
            return None
        stalls = lane.stalls + 1
        if stalls >= self._config.park_after_stalls:
            state = LaneState.PARKED
            due = now + PARKED_RETRY_MS
        else:
            state = LaneState.DUE
            due = now + backoff_ms(stalls, self._config, self._rng)
        row = self._storage.exec(
            _CLAIM, due, due, stalls, state.value, state.value, lane.id, lane.revision,
            lane.stalls,
        ).first()
        if row is None:
            return None
        reported = bool(row["reported"])
        return Lane(lane.id, due, due, lane.revision, stalls, state, reported, lane.cursor)

    def complete(self, lane: Lane, next_due: int | None) -> bool:
        """Finish the wave that claimed ``lane``; False when a producer enrolled it since.

        Compare-and-set on ``revision``: work that raced the wave keeps its newer revision
        due, and completing twice changes nothing more. ``next_due=None`` makes the lane idle
        and replenishes its budget; a deadline keeps it due there (a parked lane never earlier
        than its hourly floor) without replenishing it.
        """
        if next_due is None:
            return self._storage.exec(_COMPLETE_IDLE, lane.id, lane.revision).changed == 1
        due = int(next_due)
        written = self._storage.exec(
            _COMPLETE_DUE, due, due, due, due, lane.id, lane.revision
        ).changed
        return written == 1

    def replenish(self, lane_id: str, fallback: int) -> bool:
        """The running wave of ``lane_id`` moved its work forward; True when that changed the row.

        Called inside the transaction that commits the progress (an event acknowledged, a batch
        delivered): the claims without progress so far no longer count, so ``stalls`` returns to
        0 and a parked lane is due again, its parking no longer to report. The claim's crash
        fallback is brought forward to ``fallback`` at the latest (a parked lane's was an hour
        away). Unlike a producer's progress it keeps the ``revision``: the wave's own work is not
        new work racing it, so the wave still completes the lane. An idle lane (no wave holds
        it) is left alone, and repeating it writes nothing.
        """
        fallback = int(fallback)
        changed = self._storage.exec(
            _REPLENISH, fallback, fallback, lane_id, fallback, fallback
        ).changed
        return changed == 1

    def bring_forward(self, lane_id: str, by: int) -> bool:
        """Make the due lane ``lane_id`` due no later than ``by``, its retry floor included.

        For a deadline the lane's own work fixed before its wave ran, such as a schedule's next
        fire time: a failed wave's backoff and a parking's hourly floor may not postpone it
        (the lane stays parked, with its report, and still backs off from anything earlier).
        Keeps the revision, so the wave holding the lane still completes it; an idle lane is
        left alone, and nothing is written when the lane is already due by then. True when
        the row changed.
        """
        by = int(by)
        return self._storage.exec(_BRING_FORWARD, by, by, lane_id, by, by).changed == 1

    def checkpoint_native(self, due_at: int | None) -> None:
        """Set the native lane's deadline as decided by a pass (None: nothing native is due).

        The native lane's retry floor is the generation record's retry, not ``not_before``,
        so this clears the floor; it does not bump the revision (it is not a producer).
        One statement while the lane's row exists (it is registered at start-up); nothing is
        written when the lane already is as asked.
        """
        self.set_due(NATIVE, due_at)

    def set_due(self, lane_id: str, due_at: int | None) -> None:
        """Set the deadline of a lane the pass drives itself (native, publication), with no
        wave claiming it: its floor is its owner's, so none is kept here, and the revision
        stays (the pass is not a producer). Nothing is written when the lane already is as
        asked; a missing row is registered first."""
        for _ in range(2):
            if due_at is None:
                changed = self._storage.exec(_CHECKPOINT_IDLE, lane_id).changed
            else:
                changed = self._storage.exec(_CHECKPOINT_DUE, int(due_at), lane_id,
                                             int(due_at)).changed
            # Nothing changed: the lane already is as asked, or its row is missing (then it
            # is registered idle and set once more).
            if changed or self._storage.exec(_REGISTER, lane_id).changed == 0:
                return

    def defer(self, until: int) -> int:
        """Make every lane due before ``until`` due at ``until``; return how many moved.

        For a maintenance pass that failed before it could serve any lane: the whole pass is
        backed off, and the queue (not only the slot) says so, so that nothing rebuilt from
        it (a start-up, a later decision) arms the alarm before ``until``. Nothing else about
        the lanes changes (see ``_DEFER``): a producer enrolling one afterwards is not
        postponed.
        """
        return self._storage.exec(_DEFER, int(until), int(until)).changed

    def drop(self, lane_id: str) -> bool:
        """Delete the row of ``lane_id`` (a lane this deployment no longer declares); True when
        there was one."""
        return self._storage.exec(_DROP, lane_id).changed == 1

    def take_parked_reports(self) -> list[Lane]:
        """The parked lanes not reported yet, each marked reported so a parking is reported once.

        The mark is a compare-and-set on ``reported = 0``: taking reports twice returns a lane
        only the first time.
        """
        taken: list[Lane] = []
        for row in self._storage.exec(_SELECT_UNREPORTED):
            lane = Lane.from_row(row)
            if self._storage.exec(_MARK_REPORTED, lane.id).changed == 1:
                taken.append(replace(lane, reported=True))
        return taken

    def next(self) -> int | None:
        """The earliest ``due_at`` of any lane (already at or after its floor), or None; a
        held lane counts from the end of its hold at the earliest.

        One indexed row read (``tl_lanes_due``); with ``k`` lanes held, ``k + 1`` rows: one
        of them at least is not held, and due no later than any lane after them.
        """
        if not self._holds:
            value = self._storage.exec(_SELECT_NEXT).scalar()
            return None if value is None else int(value)
        rows = self._storage.exec(_SELECT_NEXT_HELD, len(self._holds) + 1)
        dues = [max(int(row["due_at"]), self._holds.get(str(row["id"]), 0)) for row in rows]
        return min(dues, default=None)

    def due(self, now: int, limit: int = 100) -> list[Lane]:
        """Lanes with ``due_at <= now`` and not held past ``now``, earliest first, at most
        ``limit`` of them."""
        if not self._holds:
            return [Lane.from_row(row) for row in self._storage.exec(_SELECT_DUE, now, limit)]
        rows = self._storage.exec(_SELECT_DUE, now, limit + len(self._holds))
        lanes = [Lane.from_row(row) for row in rows]
        return [lane for lane in lanes if self._holds.get(lane.id, now) <= now][:limit]


__all__ = [
    "DELAYED",
    "FRAMEWORK_LANES",
    "LIFECYCLE",
    "MESSAGES",
    "NATIVE",
    "PARKED_RETRY_MS",
    "PROJECTION",
    "PUBLICATION",
    "RECOVERY_EVENTS",
    "RESERVED_PREFIX",
    "RETENTION",
    "DueQueue",
    "Lane",
    "LaneState",
    "backoff_ms",
    "validate_host_lane_id",
    "validate_lane_id",
]
