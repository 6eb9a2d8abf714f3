"""Schedules at run time: each declared schedule is a host lane whose waves run its fires.

An application declares a schedule on its :class:`~threadline.Application`::

    @app.every(timedelta(minutes=5), id="billing-sync")
    async def billing_sync(ctx: threadline.ScheduleContext) -> None:
        await ctx.submit("billing", {"as_of": ctx.fire_time.isoformat()}, agent="sync")

Its fire times are :mod:`threadline.schedules`' pure values; this module keeps them durable, one
``tl_schedules`` row per schedule, and runs them through the lane of the same id (a concurrent
host lane: schedule ids and host lane ids are one namespace).

**Start-up** (:meth:`ScheduleRunner.start`, before any event): a schedule with no row, or whose
stored ``spec`` differs from its declaration, gets the declaration's first fire after now; its
lane is enrolled there. A row no declaration claims any more is dropped with a log line. A
lane that lost its deadline (idle, or later than the stored next fire) gets it back.

**A wave** of the lane, at or after the stored next fire time ``N``:

1. coalesces (:meth:`~threadline.schedules.EverySchedule.due`): the fire to run is the latest
   one in ``[N, now]``, however many were missed, and the next fire time the first after now.
   Both are committed as the row's ``pending_fire`` and ``next_fire`` BEFORE the function is
   called (failpoint ``schedule:fire:recorded``), with the lane held to that next fire
   (:meth:`~threadline.maintenance.lanes.Wave.due_by`), so a run lost with the object, that
   failed, or cancelled with its pass runs the same fire again, by the next fire at the
   latest: ``ctx.fire_time`` and every default idempotency key of ``ctx.submit`` come out the
   same, and the ledger admits each once. The function is thus run at least once per fire
   (again after a loss between its return and its completion); its completion and its
   submissions are exactly once;
2. calls the function with a :class:`ScheduleContext` (``schedule:run:returned`` after);
3. completes: a compare-and-set clearing ``pending_fire``, so a fire completes once, in the
   transaction that reports the wave's progress; the next fire is the first after the run
   ended (:meth:`~threadline.schedules.EverySchedule.next_after_run`), so a schedule never
   overlaps itself and a long run is not followed by the fires it outlasted
   (``schedule:run:completed``).

A run that raises (or overruns its allowance) reports no progress: its lane backs off, parks
after ``park_after_stalls`` failed runs in a row and is reported once, like any lane. The
failure is recorded on the row (``failures``, ``last_error``) and the pending fire is run
again at each retry, until the next fire time comes: the wave holds its lane to that time
(:meth:`~threadline.maintenance.lanes.Wave.due_by`), so neither the backoff nor a parking's
hourly floor postpones it, and the new fire supersedes the failed one (coalescing again).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from threadline.clock import Clock, from_epoch_ms
from threadline.environment import Environment
from threadline.errors import InvalidSchedule, SchedulingError, ThreadlineError
from threadline.maintenance.host_lanes import DEFAULT_DISPATCH_TIMEOUT, allowance_ms
from threadline.maintenance.lane_wave import Wave, current_wave
from threadline.maintenance.lanes import LaneHandler
from threadline.maintenance.schedule_context import ScheduleContext, ScheduleFn
from threadline.schedules import CronSchedule, EverySchedule, Schedule
from threadline.scheduling import AlarmService, DueQueue, Failpoints, LaneState
from threadline.storage.port import Row, Storage
from threadline.threads.agents import AgentRegistry
from threadline.threads.ledger import Ledger
from threadline.threads.model import MAX_ERROR_MESSAGE_CHARS, digest

_logger = logging.getLogger("threadline.maintenance")

_SELECT_SCHEDULES = (
    "SELECT id, spec, next_fire, pending_fire, failures, last_fire, last_ended_at,"
    " last_error_type, last_error, last_failed_at, last_failed_fire FROM tl_schedules "
)
_SELECT = _SELECT_SCHEDULES + "WHERE id = ?"
_SELECT_ALL = _SELECT_SCHEDULES + "ORDER BY id"
# Start-up: every stored schedule with its lane's deadline, in one statement.
_SELECT_AT_START = (
    "SELECT s.id AS id, s.spec AS spec, s.next_fire AS next_fire,"
    " s.pending_fire AS pending_fire, l.due_at AS due_at"
    " FROM tl_schedules AS s LEFT JOIN tl_lanes AS l ON l.id = s.id ORDER BY s.id"
)
# A schedule starts (or starts afresh under a new spec): no pending fire, no failures. What
# operators read of its past runs stays.
_START = """
INSERT INTO tl_schedules (id, spec, next_fire) VALUES (?, ?, ?)
ON CONFLICT (id) DO UPDATE SET spec = excluded.spec, next_fire = excluded.next_fire,
    pending_fire = NULL, failures = 0
"""
_DROP = "DELETE FROM tl_schedules WHERE id = ?"
# The fire to run, recorded before the function is called; fenced on the next fire time read.
_RECORD = """
UPDATE tl_schedules SET pending_fire = ?, next_fire = ?, failures = 0
WHERE id = ? AND next_fire = ?
"""
_ADVANCE = "UPDATE tl_schedules SET next_fire = ? WHERE id = ? AND next_fire = ?"
# A fire completes once: only the run of the pending fire clears it.
_COMPLETE = """
UPDATE tl_schedules SET pending_fire = NULL, failures = 0, last_fire = ?, last_ended_at = ?,
    next_fire = max(next_fire, ?)
WHERE id = ? AND pending_fire = ?
"""
_FAILED = """
UPDATE tl_schedules SET failures = failures + 1, last_error_type = ?, last_error = ?,
    last_failed_at = ?, last_failed_fire = ?
WHERE id = ? AND pending_fire = ?
"""

@dataclass(frozen=True, slots=True)
class DeclaredSchedule:
    """One declared schedule: when it fires, what it runs, and the bound of one run."""

    schedule: Schedule
    fn: ScheduleFn
    dispatch_timeout_ms: int

    @property
    def id(self) -> str:
        """The schedule's id (and its lane's)."""
        return self.schedule.id


class Schedules:
    """The schedules an application declares, each checked as it is declared."""

    def __init__(self) -> None:
        self._declared: dict[str, DeclaredSchedule] = {}

    def check(self, schedule: object, *, dispatch_timeout: object) -> int:
        """Check a declaration; return its allowance in whole milliseconds.

        Raises :class:`~threadline.InvalidSchedule` for something that is not a schedule, an
        id already declared, or an allowance that is not a ``timedelta`` from 1 ms to 300 s.
        """
        if not isinstance(schedule, EverySchedule | CronSchedule):
            raise InvalidSchedule(
                f"expected an EverySchedule or a CronSchedule, got {type(schedule).__name__}")
        if schedule.id in self._declared:
            raise InvalidSchedule(f"schedule {schedule.id!r} is already declared")
        try:
            return allowance_ms(f"schedule {schedule.id!r}", dispatch_timeout)
        except SchedulingError as exc:
            raise InvalidSchedule(exc.message) from None

    def add(
        self,
        schedule: Schedule,
        fn: ScheduleFn,
        *,
        dispatch_timeout: timedelta = DEFAULT_DISPATCH_TIMEOUT,
    ) -> DeclaredSchedule:
        """Declare ``schedule`` run by ``fn``; see :meth:`check` for what is refused."""
        timeout_ms = self.check(schedule, dispatch_timeout=dispatch_timeout)
        if not callable(fn):
            raise InvalidSchedule(f"schedule {schedule.id!r}: the function must be callable")
        declared = DeclaredSchedule(schedule, fn, timeout_ms)
        self._declared[schedule.id] = declared
        return declared

    def get(self, schedule_id: str) -> DeclaredSchedule | None:
        """The schedule declared as ``schedule_id``, or None."""
        return self._declared.get(schedule_id)

    @property
    def ids(self) -> frozenset[str]:
        """The declared ids."""
        return frozenset(self._declared)

    def __iter__(self) -> Iterator[DeclaredSchedule]:
        return iter(self._declared.values())

    def __len__(self) -> int:
        return len(self._declared)

    def __contains__(self, schedule_id: object) -> bool:
        return schedule_id in self._declared


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One ``tl_schedules`` row, decoded."""

    id: str
    spec: str
    next_fire: int
    pending_fire: int | None
    failures: int
    last_fire: int | None
    last_ended_at: int | None
    last_error_type: str | None
    last_error: str | None
    last_failed_at: int | None
    last_failed_fire: int | None

    @classmethod
    def from_row(cls, row: Row) -> ScheduleRow:
        """Decode a row read with every column."""

        def optional(name: str) -> int | None:
            value = row[name]
            return None if value is None else int(value)

        return cls(
            id=str(row["id"]), spec=str(row["spec"]), next_fire=int(row["next_fire"]),
            pending_fire=optional("pending_fire"), failures=int(row["failures"]),
            last_fire=optional("last_fire"), last_ended_at=optional("last_ended_at"),
            last_error_type=row["last_error_type"], last_error=row["last_error"],
            last_failed_at=optional("last_failed_at"),
            last_failed_fire=optional("last_failed_fire"),
        )


@dataclass(frozen=True, slots=True)
class _Taken:
    """What a wave found to do: the fire to run (None: nothing) and the next fire time."""

    fire: int | None
    next_fire: int
    superseded: int | None = None
    failures: int = 0


class ScheduleRunner:
    """The declared schedules of one object incarnation: their rows and their lanes' waves."""

    def __init__(
        self,
        storage: Storage,
        schedules: Schedules,
        *,
        due_queue: DueQueue,
        alarm: AlarmService,
        clock: Clock,
        ledger: Ledger,
        agents: AgentRegistry,
        failpoints: Failpoints,
        host_lanes: frozenset[str] = frozenset(),
        log: Callable[[str], None] | None = None,
        env: Environment | None = None,
    ) -> None:
        self._storage = storage
        self._env = env
        self._schedules = schedules
        self._queue = due_queue
        self._alarm = alarm
        self._clock = clock
        self._ledger = ledger
        self._agents = agents
        self._failpoints = failpoints
        self._host_lanes = host_lanes
        self._log = log if log is not None else _logger.error

    # -- start-up ----------------------------------------------------------------------------

    def start(self) -> list[str]:
        """Start every declared schedule and drop the stored ones no longer declared.

        One transaction reading each stored schedule with its lane's deadline (one row each);
        it writes only what changed: a new schedule, one whose declaration changed (its next
        fire time is the first after now), one no longer declared (its row, and its lane's
        unless a host lane now has that id), a lane that lost its deadline. Returns the ids
        dropped, each logged once.
        """
        now = self._clock.now_ms()
        declared = {item.id: item for item in self._schedules}
        host_lanes = self._host_lanes

        def start() -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
            dropped: list[tuple[str, str]] = []
            restarted: list[tuple[str, str, str]] = []
            stored: set[str] = set()
            changed = False
            for row in self._storage.exec(_SELECT_AT_START):
                schedule_id = str(row["id"])
                stored.add(schedule_id)
                item = declared.get(schedule_id)
                if item is None:
                    self._storage.exec(_DROP, schedule_id)
                    if schedule_id not in host_lanes:
                        self._queue.drop(schedule_id)
                    dropped.append((schedule_id, str(row["spec"])))
                    continue
                if row["spec"] != item.schedule.spec:
                    restarted.append((schedule_id, str(row["spec"]), item.schedule.spec))
                    self._begin(item.schedule, now)
                    changed = True
                    continue
                # The stored next fire holds (a pending fire is retried by then at the latest).
                next_fire = int(row["next_fire"])
                due_at = row["due_at"]
                if due_at is None:
                    pending = row["pending_fire"] is not None
                    self._queue.enroll(schedule_id, now if pending else next_fire)
                    changed = True
                elif int(due_at) > next_fire:
                    changed = self._queue.bring_forward(schedule_id, next_fire) or changed
            for schedule_id, item in declared.items():
                if schedule_id not in stored:
                    self._begin(item.schedule, now)
                    changed = True
            if changed:
                self._alarm.ensure_due(now)
            return dropped, restarted

        dropped, restarted = self._storage.transaction(start)
        for schedule_id, spec in dropped:
            self._log(f"threadline: schedule {schedule_id!r} ({spec}) is not declared in this "
                      "deployment; dropped")
        for schedule_id, before, after in restarted:
            self._log(f"threadline: schedule {schedule_id!r} changed from {before} to {after}; "
                      "it starts afresh from its next fire time")
        return [schedule_id for schedule_id, _ in dropped]

    def _begin(self, schedule: Schedule, now: int) -> int:
        """Store the schedule's first fire after ``now`` and make its lane due then."""
        first = schedule.next_fire(now)
        self._storage.exec(_START, schedule.id, schedule.spec, first)
        # The lane's deadline, backoff and parking belonged to the former declaration.
        self._queue.reschedule(schedule.id, first)
        return first

    # -- runs --------------------------------------------------------------------------------

    def handler_for(self, declared: DeclaredSchedule) -> LaneHandler:
        """The lane runner's handler for ``declared``: one wave runs at most one fire."""

        async def run(now: int, deadline: int) -> int | None:
            wave = current_wave()
            if wave is None:
                raise SchedulingError(f"schedule {declared.id!r} runs only inside its wave")
            return await self._run(declared, wave, now, deadline)

        return run

    async def _run(self, declared: DeclaredSchedule, wave: Wave, now: int, deadline: int) -> int:
        schedule = declared.schedule
        taken = self._storage.transaction(lambda: self._take(schedule, wave, now))
        if taken.superseded is not None:
            self._log(
                f"threadline: schedule {schedule.id!r}: the fire of {_iso(taken.superseded)} "
                f"never completed (its run failed {taken.failures} times); superseded by the "
                f"fire of {_iso(taken.fire)}")
        fire = taken.fire
        if fire is None:
            return taken.next_fire
        await self._failpoints.reached("schedule:fire:recorded")
        ctx = ScheduleContext(
            schedule, fire, from_epoch_ms(now), from_epoch_ms(deadline),
            storage=self._storage, ledger=self._ledger, agents=self._agents, wave=wave,
            env=self._env,
        )
        try:
            result = declared.fn(ctx)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            self._failed(schedule.id, fire, wave, "Cancelled",
                         "the run was cancelled: it ran past its dispatch_timeout, or the "
                         "event ended")
            raise
        except Exception as exc:
            self._failed(schedule.id, fire, wave, type(exc).__name__, str(exc))
            raise
        await self._failpoints.reached("schedule:run:returned")
        ended = self._clock.now_ms()
        following = schedule.next_after_run(fire, ended)
        next_fire = self._storage.transaction(
            lambda: self._complete(schedule.id, fire, ended, following, wave, taken.next_fire))
        await self._failpoints.reached("schedule:run:completed")
        return next_fire

    def _take(self, schedule: Schedule, wave: Wave, now: int) -> _Taken:
        """Inside the wave's first transaction: the fire this wave runs, recorded as pending."""
        row = self._read(schedule.id)
        if row is None or row.spec != schedule.spec:
            # Start-up writes the row; one missing here was removed behind the object's back.
            first = self._begin(schedule, now)
            wave.progress()
            return _Taken(None, first)
        next_fire, pending = row.next_fire, row.pending_fire
        superseded = None
        if now >= next_fire:
            due = schedule.due(next_fire, now)
            if due.fire_ms is not None:
                self._write(_RECORD, due.fire_ms, due.next_ms, schedule.id, next_fire)
                superseded = pending
                pending = due.fire_ms
            else:
                self._write(_ADVANCE, due.next_ms, schedule.id, next_fire)
            next_fire = due.next_ms
        if pending is None:
            # Woken before the next fire (a crash fallback, say): nothing to run, nothing stalls.
            wave.progress()
            return _Taken(None, next_fire)
        # However this run ends (failed, overrun, lost with the object, cancelled with its
        # pass), its retries never postpone the next fire: committed with the fire recorded.
        wave.due_by(next_fire)
        return _Taken(pending, next_fire, superseded, row.failures)

    def _complete(self, schedule_id: str, fire: int, ended: int, following: int,
                  wave: Wave, recorded: int) -> int:
        """Inside the completion's transaction: clear the pending fire, report progress;
        return the next fire time stored."""
        if self._storage.exec(_COMPLETE, fire, ended, following, schedule_id, fire).changed:
            # Refused once the wave ended (an abandoned run): the completion rolls back with it.
            wave.progress()
            return max(recorded, following)
        # Not this run's to complete any more: nothing progressed.
        row = self._read(schedule_id)
        return following if row is None else row.next_fire

    def _failed(self, schedule_id: str, fire: int, wave: Wave, error_type: str,
                message: str) -> None:
        """Record the failure of the pending fire's run for operators; never raises."""
        if wave.ended:
            return
        if len(message) > MAX_ERROR_MESSAGE_CHARS:
            message = message[:MAX_ERROR_MESSAGE_CHARS]
        now = self._clock.now_ms()
        try:
            self._storage.transaction(lambda: self._storage.exec(
                _FAILED, error_type, message, now, fire, schedule_id, fire))
        except ThreadlineError as exc:
            self._log(f"threadline: schedule {schedule_id!r}: could not record the failure of "
                      f"its run ({type(exc).__name__})")

    def _read(self, schedule_id: str) -> ScheduleRow | None:
        row = self._storage.exec(_SELECT, schedule_id).first()
        return None if row is None else ScheduleRow.from_row(row)

    def _write(self, sql: str, *params: int | str) -> None:
        if self._storage.exec(sql, *params).changed != 1:
            raise SchedulingError("the schedule's row changed under its wave")

    # -- operators ---------------------------------------------------------------------------

    def rows(self) -> list[ScheduleRow]:
        """Every stored schedule, by id."""
        return [ScheduleRow.from_row(row) for row in self._storage.exec(_SELECT_ALL)]

    def readout(self) -> Sequence[Mapping[str, Any]]:
        """Each declared schedule as operators see it (shaped like the API's ``ScheduleView``):
        its declaration, next and last fire, last error and state, by id."""
        stored = {row.id: row for row in self.rows()}
        out: list[Mapping[str, Any]] = []
        for item in sorted(self._schedules, key=lambda declared: declared.id):
            row = stored.get(item.id)
            if row is None:
                continue
            lane = self._queue.get(item.id)
            schedule = item.schedule
            out.append({
                "id": item.id,
                "kind": schedule.kind,
                "expression": schedule.expression if isinstance(schedule, CronSchedule) else None,
                "interval_ms": schedule.interval_ms if isinstance(schedule, EverySchedule)
                else None,
                "tz": schedule.tz if isinstance(schedule, CronSchedule) else None,
                "dispatch_timeout_ms": item.dispatch_timeout_ms,
                "state": _state(row, lane.state if lane is not None else None),
                "next_fire": row.next_fire,
                "due_at": None if lane is None else lane.due_at,
                "pending_fire": row.pending_fire,
                "failures": row.failures,
                "last_fire": row.last_fire,
                "last_ended_at": row.last_ended_at,
                "last_error": None if row.last_error_type is None else {
                    "type": row.last_error_type,
                    "message": row.last_error or "",
                    "at": row.last_failed_at,
                    "fire": row.last_failed_fire,
                },
            })
        return out


def lanes_key(schedules: Schedules, host_lanes: Iterable[str]) -> str:
    """A stable digest of the declared schedules (id and spec) and host lane ids.

    Start-up reads the schedules' and host lanes' rows only when it differs from the one
    stored by the last start (see :meth:`ScheduleRunner.start`,
    :meth:`~threadline.maintenance.lanes.LaneRunner.drop_removed`): independent of the
    declaration order and of the functions, so only adding, removing or changing a schedule,
    or adding or removing a host lane, changes it.
    """
    parts = ["threadline-lanes:v1"]
    for item in sorted(schedules, key=lambda declared: declared.id):
        parts.extend(("schedule", item.id, item.schedule.spec))
    for lane_id in sorted(host_lanes):
        parts.extend(("lane", lane_id))
    return digest(*parts)


def _state(row: ScheduleRow, lane: LaneState | None) -> str:
    """``parked`` (its lane is), ``retrying`` (its pending fire's run failed), ``running`` (a
    fire is recorded and its run has not failed) or ``scheduled`` (waiting for its next fire)."""
    if lane is LaneState.PARKED:
        return "parked"
    if row.pending_fire is None:
        return "scheduled"
    return "retrying" if row.failures else "running"


def _iso(epoch_ms: int | None) -> str:
    return "-" if epoch_ms is None else from_epoch_ms(epoch_ms).isoformat()


__all__ = [
    "DeclaredSchedule",
    "ScheduleContext",
    "ScheduleFn",
    "ScheduleRow",
    "ScheduleRunner",
    "Schedules",
    "lanes_key",
]
