"""Test kit: run a threadline object in plain pytest, without workerd.

:class:`SimulatedObject` runs the same :class:`~threadline.space.Space` the deployed Durable
Object runs, over :class:`~threadline.storage.SqliteStorage` (one database file) with a
:class:`~threadline.clock.ManualClock`, a seeded ``random.Random`` and deterministic ids. It
delivers the alarm the way the platform does (:meth:`SimulatedObject.run_alarms`), loses the
object on demand (:meth:`SimulatedObject.evict`, :meth:`SimulatedObject.crash_at`) and offers the
operations a client or an operator performs (admit, approve, abort, resolve)::

    async def echo_once() -> None:
        async with SimulatedObject(app) as obj:
            sub = obj.admit("thread-1", "echo", "hi")
            await obj.run_alarms()
            assert obj.submission(sub.id).result == {"got": "hi"}

    def test_echo() -> None:
        asyncio.run(echo_once())

:class:`ThreadHarness` is the lower-level tool for testing the thread runtime itself: it drives
``process_thread_head`` directly, without the maintenance pass.

Importing this module never imports the ``workers`` SDK, ``js`` or ``pyodide``.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.delivery.outbound import HttpPort
from threadline.errors import Conflict, Evicted, StorageError
from threadline.ids import RandomIds
from threadline.maintenance import PassReport, publication_lane
from threadline.scheduling import (
    DELAYED,
    MESSAGES,
    NATIVE,
    PUBLICATION,
    DueQueue,
    Failpoints,
    Scheduler,
    build_scheduler,
    read_state,
)
from threadline.scheduling.state import MaintenanceState
from threadline.space import Space
from threadline.storage import SqliteStorage
from threadline.storage.port import Rows, SqlValue
from threadline.threads import delayed, message_rows, transitions
from threadline.threads import waits as wait_rows
from threadline.threads.ledger import Ledger
from threadline.threads.model import (
    ApprovalDecision,
    JsonValue,
    Resolution,
    ScheduledSubmission,
    Settlement,
    Submission,
    check_id,
)
from threadline.threads.recovery import RecoverySweepResult
from threadline.threads.routing import MessageEnvelope, MessageRouter, Verdict
from threadline.threads.runtime import ThreadRuntime
from threadline.threads.waits import Wait

T = TypeVar("T")

#: How many passes :meth:`SimulatedObject.run_alarms` fires before it gives up by default.
DEFAULT_MAX_PASSES = 1_000

# Event-loop turns without news before the clock moves, on a loop that hides its ready queue.
_BLIND_IDLE_TURNS = 20
#: What the alarm invariant checks of each schedule: its next fire and its pending one.
_SCHEDULE_FIRES = "SELECT id, next_fire, pending_fire FROM tl_schedules ORDER BY id"
_NO_DISK_SYNC = "PRAGMA synchronous = OFF"
_SETTLED_RECORDS = "SELECT COUNT(*) AS n FROM tl_history WHERE record_id = ?"
_SUBMISSIONS = "SELECT id FROM tl_submissions ORDER BY thread_id, seq"
_THREAD_SUBMISSIONS = "SELECT id FROM tl_submissions WHERE thread_id = ? ORDER BY seq"


class QuiescenceError(AssertionError):
    """The object kept its alarm set for more passes than allowed: it never quiesces."""


class AlarmInvariantError(AssertionError):
    """A commit left due work without an alarm that fires in time."""


@dataclass
class Effects:
    """A log of what agents did to the outside world; it survives eviction like the world does.

    Agents under test call :meth:`hit` inside their steps; a test then counts how often each
    effect really happened, including runs lost to a crash.
    """

    calls: dict[str, int] = field(default_factory=dict)

    def hit(self, name: str) -> int:
        """Record one occurrence of ``name``; return how many there have been."""
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.calls[name]

    def count(self, name: str) -> int:
        """How often ``name`` happened."""
        return self.calls.get(name, 0)


@dataclass
class Crash:
    """A crash installed by :meth:`SimulatedObject.crash_at`."""

    location: str
    occurrence: int
    #: Arrivals at ``location`` counted since the crash was installed.
    arrivals: int = 0
    #: True once :class:`~threadline.errors.Evicted` was raised at the chosen arrival.
    fired: bool = False


@dataclass
class StatementFailure:
    """Storage failures installed by :meth:`SimulatedObject.fail_statements`."""

    containing: str
    #: How many more matching statements will fail.
    remaining: int


class _SimulatedStorage(SqliteStorage):
    """SQLite storage that reports each outermost commit and fails statements on request."""

    def __init__(
        self, path: str, on_commit: Callable[[], None], failures: list[StatementFailure]
    ) -> None:
        super().__init__(path)
        self._on_commit = on_commit
        self.failures = failures

    def exec(self, sql: str, *params: SqlValue) -> Rows:
        for failure in self.failures:
            if failure.remaining > 0 and failure.containing in sql:
                failure.remaining -= 1
                raise StorageError(f"injected storage failure ({failure.containing!r})")
        return super().exec(sql, *params)

    def transaction(self, fn: Callable[[], T]) -> T:
        result = super().transaction(fn)
        if not self.in_transaction():
            self._on_commit()
        return result


class SimulatedObject:
    """One Durable Object of ``app``, simulated over a SQLite file and a manual clock.

    ``path`` is the database file (a temporary one, removed by :meth:`close`, when None);
    ``clock`` defaults to a new :class:`~threadline.clock.ManualClock`; ``seed`` makes the
    randomness (backoff jitter) and ids of every incarnation reproducible.
    ``check_alarm_invariant=True`` verifies after every commit made outside an alarm handler,
    after each handler returns and after each start that due work has an alarm that fires in
    time, raising :class:`AlarmInvariantError` otherwise. ``space`` names the space the object
    serves and ``router`` reaches other spaces (see :class:`SimulatedDeployment`, which sets
    both): without them a message an agent sends fails with ``NoRoute``. As on the platform,
    the name is given to the incarnations a request starts, not to one restarted by its
    alarm after a loss in the handler (nor after ``evict(named=False)``): those use the name
    the object stored.

    Use it as ``async with SimulatedObject(app) as obj:`` (starts, then closes), or call
    :meth:`start` and :meth:`close` yourself.
    """

    def __init__(
        self,
        app: Application,
        path: str | Path | None = None,
        clock: ManualClock | None = None,
        seed: int = 0,
        *,
        check_alarm_invariant: bool = False,
        space: str | None = None,
        router: MessageRouter | None = None,
        env: Any = None,
        http: HttpPort | None = None,
    ) -> None:
        self.app = app
        #: The Worker environment and outbound HTTP port subscribers' deliveries see.
        self.env = env
        self.http = http
        self.clock = clock if clock is not None else ManualClock()
        self.seed = seed
        #: The space's id (messages sent into it are admitted locally); None: not known.
        self.name = space
        self.router = router
        self.check_alarm_invariant = check_alarm_invariant
        self._tempdir: str | None = None
        if path is None:
            self._tempdir = tempfile.mkdtemp(prefix="threadline-sim-")
            path = Path(self._tempdir) / "object.sqlite3"
        self.path = str(path)
        #: Every pass report, in order, across incarnations.
        self.reports: list[PassReport] = []
        #: Every crash installed with :meth:`crash_at`.
        self.crashes: list[Crash] = []
        #: How many times the object was lost and rebuilt.
        self.evictions = 0
        self.incarnation = 0
        self._handler_running = False
        self._alarm_restart = False
        self._starting = False
        self._started = False
        self._observer: SqliteStorage | None = None
        self._hits: Counter[str] = Counter()
        self._storage_failures: list[StatementFailure] = []
        self._build()

    # -- life cycle --------------------------------------------------------------------------

    def _build(self, *, named: bool = True) -> None:
        previous = getattr(self, "failpoints", None)
        if previous is not None:
            for location in previous.locations:
                self._hits[location] += previous.hits(location)
        self.incarnation += 1
        label = f"{self.seed}:{self.incarnation}"
        self.failpoints = Failpoints()
        self.storage: SqliteStorage = _SimulatedStorage(
            self.path, self._committed, self._storage_failures
        )
        # Committed rows survive the loss of the object, which is all a simulation needs; not
        # waiting for the disk at each commit makes a test ten times faster.
        self.storage.exec(_NO_DISK_SYNC)
        self.space = Space(
            self.app,
            self.storage,
            clock=self.clock,
            rng=random.Random(f"rng:{label}"),
            ids=RandomIds(random.Random(f"ids:{label}")),
            failpoints=self.failpoints,
            name=self.name if named else None,
            router=self.router,
            env=self.env,
            http=self.http,
        )
        self._install_crashes()

    async def start(self) -> None:
        """Start the object as the platform does before its first event (migrate, re-arm)."""
        self._starting = True
        try:
            await self.space.start()
        finally:
            self._starting = False
        self._started = True
        self._check("after start")

    async def evict(self, *, named: bool = True) -> None:
        """Lose the object: drop every in-memory part, rebuild it from the file, start again.

        Whatever the old incarnation still had running is cancelled, and its storage is closed
        so that nothing it does afterwards reaches the file. ``named=False`` starts the next
        incarnation as its alarm does on the platform: it is not given the space's name
        (``ctx.id.name`` is absent then), so it knows only what the object stored. The
        object lost in an alarm handler (see :meth:`crash_at`) restarts that way.
        """
        self.evictions += 1
        named = named and not self._alarm_restart
        self._alarm_restart = False
        self._close_storage()
        await asyncio.sleep(0)
        self._build(named=named)
        try:
            await self.start()
        except BaseException as exc:
            # Lost again while starting (a crash installed at a start-up failpoint).
            if not is_eviction(exc):
                raise
            # Started again the same way (evict() as tests wrap it).
            self._alarm_restart = not named
            await self.evict()

    async def redeploy(self, app: Application) -> None:
        """Deploy ``app`` (new agents, versions or hooks) on the same storage: a restart."""
        self.app = app
        await self.evict()

    def close(self) -> None:
        """Close the database; a temporary file is removed."""
        self._close_storage()
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    def _close_storage(self) -> None:
        self.storage.close()
        if self._observer is not None:
            self._observer.close()
            self._observer = None

    async def __aenter__(self) -> SimulatedObject:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the platform's alarm ----------------------------------------------------------------

    @property
    def alarm_at(self) -> int | None:
        """The alarm slot (epoch ms), or None when no alarm is set."""
        return self.storage.known_alarm()

    async def run_alarms(
        self, until: int | None = None, max_passes: int = DEFAULT_MAX_PASSES
    ) -> list[PassReport]:
        """Fire the alarm like the platform until the slot is empty or later than ``until``.

        One handler at a time: the clock jumps forward to the slot (never backwards), the slot
        is emptied, then one pass runs; an alarm set meanwhile fires only after it returns.
        While a handler waits on the clock (a retry delay inside a step), the clock skips
        forward to that deadline. A handler lost with :class:`~threadline.errors.Evicted`
        (see :meth:`crash_at`) restarts the object (:meth:`evict`) and the loop goes on; the
        platform's automatic retry of a failed handler is not simulated, so the object must
        re-arm itself. With ``until``, the clock is at ``until`` afterwards (or later, had it
        already passed it: time never goes back).

        Returns the reports of the passes that completed. Raises :class:`QuiescenceError`
        after ``max_passes`` passes when the alarm is still due: the object never quiesces.
        """
        if not self._started:
            await self.start()
        completed: list[PassReport] = []
        passes = 0
        while True:
            slot = self.storage.known_alarm()
            if slot is None or (until is not None and slot > until):
                break
            if passes >= max_passes:
                raise QuiescenceError(self._not_quiescent(max_passes, slot))
            passes += 1
            if slot > self.clock.now_ms():
                self.clock.set(slot)
            self.storage.take_due_alarm(self.clock.now_ms())
            report = await self._fire()
            if report is not None:
                completed.append(report)
        if until is not None and until > self.clock.now_ms():
            self.clock.set(until)
        return completed

    async def _fire(self) -> PassReport | None:
        """Run one alarm handler to its end; None when the object was lost in it."""
        before = asyncio.all_tasks()
        self._handler_running = True
        handler = asyncio.ensure_future(self.space.alarm())
        try:
            await self._skip_time_while(handler)
            report = handler.result()
        except BaseException as exc:
            if not is_eviction(exc):
                raise
            self._handler_running = False
            await self._cancel_stragglers(before)
            # The platform's retry of the alarm starts the object again, without its name.
            # (Said through state, not an argument: tests wrap evict() as it is.)
            self._alarm_restart = True
            await self.evict()
            return None
        finally:
            self._handler_running = False
        self.reports.append(report)
        self._check("after an alarm handler returned")
        return report

    async def _skip_time_while(self, task: asyncio.Future[Any]) -> None:
        """Let ``task`` run; once everything waits and only the clock can move it on, move the
        clock to the earliest deadline someone sleeps until."""
        loop = asyncio.get_running_loop()
        idle_turns = 0
        while not task.done():
            await asyncio.sleep(0)
            if task.done():
                return
            busy = _has_ready_callbacks(loop)
            if busy:
                idle_turns = 0
                continue
            # Nothing runnable right now: one more turn confirms it before time is moved (many
            # more on a loop that does not show its ready queue).
            idle_turns += 1
            if idle_turns < (2 if busy is not None else _BLIND_IDLE_TURNS):
                continue
            idle_turns = 0
            deadline = self.clock.next_deadline()
            if deadline is not None:
                self.clock.set(max(deadline, self.clock.now_ms()))
            else:
                # Waiting on something outside the clock (a test's own event): let it happen.
                await asyncio.wait({task}, timeout=0.001)

    async def _cancel_stragglers(self, before: set[asyncio.Task[Any]]) -> None:
        """Cancel tasks the lost handler started: an evicted object runs nothing more."""
        current = asyncio.current_task()
        stragglers = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
        # Closing the storage first fences them: nothing they still try reaches the file.
        self._close_storage()
        for task in stragglers:
            task.cancel()
        if stragglers:
            await asyncio.gather(*stragglers, return_exceptions=True)

    def _not_quiescent(self, max_passes: int, slot: int) -> str:
        recent = ", ".join(repr(report) for report in self.reports[-3:])
        return (
            f"the object did not quiesce: after {max_passes} passes its alarm is still set "
            f"(at {slot}, now {self.clock.now_ms()}); latest reports: {recent}"
        )

    # -- crashes -----------------------------------------------------------------------------

    def crash_at(self, location: str, occurrence: int = 1) -> Crash:
        """Lose the object at the ``occurrence``-th arrival at failpoint ``location``.

        Arrivals are counted from now on, across incarnations; the crash fires once. Inside an
        alarm handler the loss restarts the object (see :meth:`run_alarms`); anywhere else the
        caller sees :class:`~threadline.errors.Evicted` and should call :meth:`evict`.
        """
        if occurrence < 1:
            raise ValueError("occurrence counts from 1")
        if location not in self.failpoints.locations:
            raise ValueError(f"unknown failpoint location {location!r}")
        crash = Crash(location, occurrence)
        self.crashes.append(crash)
        self._install_crashes()
        return crash

    def _install_crashes(self) -> None:
        for location in {crash.location for crash in self.crashes}:
            self.failpoints.install(location, self._arrived)

    def _arrived(self, location: str) -> None:
        for crash in self.crashes:
            if crash.location != location or crash.fired:
                continue
            crash.arrivals += 1
            if crash.arrivals == crash.occurrence:
                crash.fired = True
                raise Evicted(location)

    def hits(self, location: str) -> int:
        """How many times failpoint ``location`` was reached, over every incarnation."""
        return self._hits[location] + self.failpoints.hits(location)

    def fail_statements(self, containing: str, times: int = 1) -> StatementFailure:
        """Make the next ``times`` statements whose SQL contains ``containing`` raise
        :class:`~threadline.errors.StorageError`, as a failing disk or platform would (the
        transaction around them rolls back). Counted across incarnations."""
        failure = StatementFailure(containing, times)
        self._storage_failures.append(failure)
        return failure

    # -- what clients and operators do ---------------------------------------------------------

    @property
    def runtime(self) -> ThreadRuntime:
        """The current incarnation's thread runtime."""
        return self.space.runtime

    @property
    def ledger(self) -> Ledger:
        """The current incarnation's submission ledger."""
        return self.runtime.ledger

    def admit(
        self,
        thread: str,
        agent: str,
        input: JsonValue,
        key: str | None = None,
        *,
        not_before: datetime | int | None = None,
        subject: str | None = None,
    ) -> Submission | ScheduledSubmission:
        """Admit ``input`` for ``agent`` on ``thread`` (idempotent with ``key``).

        With ``not_before`` (an aware datetime, or epoch ms) ahead of the clock, it is a
        delayed submission: a :class:`~threadline.threads.ScheduledSubmission` until the
        object's alarm admits it when it falls due (see :meth:`Ledger.admit`). ``subject``
        is who submits it, as a principal's subject would be recorded (``submitted_by``).
        """
        due = delayed.due_of(not_before) if isinstance(not_before, datetime) else not_before
        return self.ledger.admit(thread, agent, input, key, not_before=due,
                                 subject=subject).submission

    def find(self, submission_id: str) -> Submission | ScheduledSubmission:
        """Read one submission, admitted or still scheduled."""
        return self.ledger.find(submission_id)

    def approve(
        self,
        submission_id: str,
        key: str,
        payload: JsonValue = None,
        *,
        approved: bool = True,
        subject: str | None = None,
    ) -> ApprovalDecision:
        """Decide the approval ``key`` of a suspended submission (``approved=False`` declines),
        as ``subject`` (recorded as ``decided_by``; None: unknown)."""
        return self.ledger.decide_approval(submission_id, key, approved=approved, payload=payload,
                                           subject=subject)

    def abort(
        self, submission_id: str, reason: str | None = None, *, subject: str | None = None
    ) -> Submission:
        """Request an abort as ``subject`` (``requested_by``); it settles at once unless an
        Attempt runs, which observes it."""
        return self.ledger.request_abort(submission_id, reason, subject=subject)

    def resolve(
        self,
        submission_id: str,
        action: Resolution | str,
        result: JsonValue = None,
        *,
        subject: str | None = None,
    ) -> Submission:
        """Resolve an Unknown Outcome as ``subject``: ``retry``, ``accept`` (with ``result``)
        or ``abort``."""
        return self.ledger.resolve_unknown(submission_id, action, result, subject=subject)

    def wake_lane(
        self, lane_id: str, at: datetime | None = None, *, cursor: int | None = None
    ) -> None:
        """Wake the host lane ``lane_id`` as the Worker's code would (see
        :meth:`Space.wake_lane`): due at ``at`` (now when None), cursor semantics included."""
        self.space.wake_lane(lane_id, at, cursor=cursor)

    def waits(self, submission_id: str) -> list[Wait]:
        """The submission's open waits: what it waits for (``kind``, ``key``, ``payload``)."""
        return wait_rows.open_waits(self.storage, submission_id)

    def submission(self, submission_id: str) -> Submission:
        """Read one submission, decoded."""
        return self.ledger.get(submission_id)

    def submissions(self, thread: str | None = None) -> list[Submission]:
        """Every submission (of ``thread``), in Thread and FIFO order."""
        rows = (
            self.storage.exec(_SUBMISSIONS)
            if thread is None
            else self.storage.exec(_THREAD_SUBMISSIONS, thread)
        )
        return [self.ledger.get(row["id"]) for row in rows]

    # -- the alarm invariant -----------------------------------------------------------------

    def _committed(self) -> None:
        # A handler's own commits are judged by its final decision, and start() by its end.
        if not self._handler_running and not self._starting:
            self._check("after a commit")

    def _check(self, when: str) -> None:
        if not self.check_alarm_invariant:
            return
        if self._observer is None:
            # A second connection reads what is committed, without touching the object's meter.
            self._observer = SqliteStorage(self.path)
            self._observer.exec(_NO_DISK_SYNC)  # its close may checkpoint the file
        problem = alarm_invariant_problem(self._observer, self.app, self.clock.now_ms(),
                                          holds=self.space.scheduler.due_queue.holds)
        if problem is not None:
            raise AlarmInvariantError(f"{when}: {problem}")


def alarm_invariant_problem(
    storage: SqliteStorage, app: Application, now: int, *, holds: Mapping[str, int] | None = None
) -> str | None:
    """What breaks the alarm invariant in ``storage`` at ``now``, or None when it holds.

    The invariant, outside a running alarm handler: if any lane is due, the alarm slot is set
    no later than ``max(earliest due, now + min_delay)``; a generation not yet processed
    has its native lane due; the delayed lane is due by the earliest delayed submission, the
    messages lane by the earliest pending message, and
    each schedule's lane by its next fire time (and its pending fire, if one is recorded). A
    lane whose waves were charged without progress may wait out its retry floor (a backoff
    or a parking) past those times, except a schedule's next fire, which nothing postpones
    once a fire is recorded. ``holds`` are
    the running incarnation's in-memory lane holds (:meth:`DueQueue.hold`, for a lane storage
    refuses to back off): a held lane's earliest due is the end of its hold.
    """
    queue = DueQueue(storage, app.config, random.Random(0))
    for lane_id, until in (holds or {}).items():
        queue.hold(lane_id, until)
    earliest = queue.next()
    slot = storage.known_alarm()
    if earliest is not None:
        bound = max(earliest, now + app.config.min_alarm_delay_ms)
        if slot is None or slot > bound:
            return f"a lane is due at {earliest} but the alarm slot is {slot} (bound {bound})"
    state = read_state(storage)
    native = queue.get(NATIVE)
    if state.processed < state.dirty and (native is None or native.due_at is None):
        return (
            f"generation {state.dirty} is not processed ({state.processed}) "
            "but the native lane is idle"
        )
    waiting = delayed.next_due(storage)
    if waiting is not None:
        problem = _lane_late(queue, DELAYED, waiting,
                             f"a delayed submission falls due at {waiting}")
        if problem is not None:
            return problem
    message_due = message_rows.next_due(storage)
    if message_due is not None:
        # A wave that delivered some messages and was lost before the rest leaves its lane due
        # at the crash fallback its progress set (within the backoff base of that progress).
        problem = _lane_late(queue, MESSAGES, message_due, f"a message is due at {message_due}",
                             lost_wave=now + app.config.alarm_backoff_base_ms)
        if problem is not None:
            return problem
    problem = _subscribers_late(storage, app, queue, state)
    if problem is not None:
        return problem
    for row in storage.exec(_SCHEDULE_FIRES):
        schedule_id, next_fire = str(row["id"]), int(row["next_fire"])
        pending = row["pending_fire"]
        if pending is None:
            problem = _lane_late(queue, schedule_id, next_fire,
                                 f"schedule {schedule_id!r} fires next at {next_fire}")
        else:
            # A recorded fire is retried (after its backoff), but never past the next fire.
            problem = _lane_late(queue, schedule_id, int(pending),
                                 f"schedule {schedule_id!r} has its fire of {pending} pending",
                                 fixed=next_fire)
        if problem is not None:
            return problem
    return None


def _subscribers_late(
    storage: SqliteStorage, app: Application, queue: DueQueue, state: MaintenanceState
) -> str | None:
    """Why a declared subscriber that is not parked, with records it wants past its cursor,
    has no pass coming, or None: the publication lane is due (by its retry time after a
    failure), or the native lane is for a generation not processed yet (whose pass delivers
    too)."""
    if not len(app.subscribers):
        return None
    if state.processed < state.dirty:
        return None
    for name, stored in publication_lane.read_rows(storage).items():
        spec = app.subscribers.get(name)
        if spec is None or stored.parked:
            continue
        kinds = {str(row["kind"]) for row in storage.exec(_KINDS_PAST, stored.cursor)}
        if not any(spec.wants(kind) for kind in kinds):
            continue
        lane = queue.get(PUBLICATION)
        if lane is None or lane.due_at is None:
            return (f"subscriber {name!r} has records past its cursor but lane "
                    f"{PUBLICATION!r} is idle")
        if stored.retry_at is not None and lane.due_at > int(stored.retry_at):
            return (f"subscriber {name!r} retries at {stored.retry_at} but lane "
                    f"{PUBLICATION!r} is due at {lane.due_at}")
    return None


_KINDS_PAST = "SELECT DISTINCT kind FROM tl_history WHERE pos > ?"


def _lane_late(
    queue: DueQueue,
    lane_id: str,
    due: int,
    what: str,
    *,
    fixed: int | None = None,
    lost_wave: int | None = None,
) -> str | None:
    """Why ``lane_id`` is not due by ``due`` (and by ``fixed`` whatever its retries), or None.

    A lane whose waves were charged without progress (``stalls``: one failed, overran or was
    lost with the object) may wait out its retry floor (``not_before``: its backoff, or a
    parking's hourly retry) past ``due``; a healthy one may not. A held lane (storage refused
    to back it off) is not due before its hold ends anyway: only whether it is idle counts.
    ``lost_wave`` bounds the crash fallback of a wave that progressed before it was lost: a
    lane due by then is not late (its progress replenished it, so it shows no stall).
    """
    lane = queue.get(lane_id)
    if lane is None or lane.due_at is None:
        return f"{what} but lane {lane_id!r} is idle"
    if queue.held_until(lane_id) is not None:
        return None
    bound = due if lane.stalls == 0 else max(due, lane.not_before)
    if lost_wave is not None:
        bound = max(bound, lost_wave)
    if fixed is not None:
        bound = min(bound, fixed)
    if lane.due_at > bound:
        return f"{what} but lane {lane_id!r} is due at {lane.due_at} (bound {bound}): {lane}"
    return None


def _has_ready_callbacks(loop: asyncio.AbstractEventLoop) -> bool | None:
    """Whether any callback is ready to run on ``loop``; None when the loop does not say
    (only CPython's own event loop keeps its ready queue where this can see it)."""
    ready = getattr(loop, "_ready", None)
    return None if ready is None else len(ready) > 0


def is_eviction(exc: BaseException) -> bool:
    """Whether ``exc`` is the loss of the object: :class:`~threadline.errors.Evicted`, alone or
    anywhere inside an exception group (a task group re-raises it wrapped)."""
    if isinstance(exc, Evicted):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(is_eviction(inner) for inner in exc.exceptions)
    return False


@dataclass
class DeliveryFailure:
    """Transient delivery failures installed by :meth:`SimulatedDeployment.fail_deliveries`."""

    #: The target space they apply to (None: any).
    to_space: str | None
    #: How many more deliveries will fail.
    remaining: int
    error: type[Exception]


@dataclass(frozen=True)
class Delivery:
    """One call :class:`SimulatedDeployment` routed: the message, its target and the verdict
    (None when it failed in transit)."""

    message_id: str
    to_space: str
    verdict: Verdict | None


class _DeploymentRouter:
    """The router each space of a :class:`SimulatedDeployment` sends through."""

    def __init__(self, deployment: SimulatedDeployment) -> None:
        self._deployment = deployment

    async def deliver(self, envelope: MessageEnvelope) -> Verdict:
        return await self._deployment.route(envelope)


class SimulatedDeployment:
    """Several spaces of one ``app``, one :class:`SimulatedObject` each, sharing a
    :class:`~threadline.clock.ManualClock`, delivering messages between them as the Worker's
    ``THREADS`` binding does::

        async with SimulatedDeployment(app, spaces=["a", "b"]) as deployment:
            deployment.space("a").admit("t1", "forward", {"text": "hi"})
            await deployment.run_alarms()
            assert deployment.space("b").submissions("t2")[0].state == SubmissionState.SETTLED

    The objects of ``spaces`` are made at once (and started with the deployment); any other
    space's object is made on first use (:meth:`space`), like ``getByName``, and started by
    :meth:`start` or :meth:`run_alarms` (a delivery into it starts it). Messages into
    another space are admitted by that space's object (:meth:`Space.admit_message`); a
    delivery that fails in transit (:meth:`fail_deliveries`, or the target lost while
    admitting) raises to the sender, which retries. :meth:`crash_at` loses one space's object
    at a failpoint, as :meth:`SimulatedObject.crash_at` does. ``env`` and ``http`` are the
    Worker environment and outbound HTTP port every space's subscribers see (one Worker serves
    them all).
    """

    def __init__(
        self,
        app: Application,
        clock: ManualClock | None = None,
        seed: int = 0,
        *,
        spaces: Iterable[str] = (),
        check_alarm_invariant: bool = False,
        env: Any = None,
        http: HttpPort | None = None,
    ) -> None:
        self.app = app
        self.clock = clock if clock is not None else ManualClock()
        self.seed = seed
        self.check_alarm_invariant = check_alarm_invariant
        self.env = env
        self.http = http
        #: The spaces' objects, by space id, in the order they were made.
        self.objects: dict[str, SimulatedObject] = {}
        #: Every cross-space delivery routed, in order.
        self.deliveries: list[Delivery] = []
        self._failures: list[DeliveryFailure] = []
        self._router = _DeploymentRouter(self)
        for name in spaces:
            self.space(name)

    def space(self, name: str) -> SimulatedObject:
        """The object of space ``name``, made (not started) on first use."""
        obj = self.objects.get(name)
        if obj is None:
            check_id(name, field="space")
            # A seed of its own per space: ids drawn in different spaces never coincide.
            obj = SimulatedObject(
                self.app, clock=self.clock, seed=self.seed * 1_000 + len(self.objects),
                check_alarm_invariant=self.check_alarm_invariant, space=name,
                router=self._router, env=self.env, http=self.http,
            )
            self.objects[name] = obj
        return obj

    async def start(self) -> None:
        """Start every space's object not started yet."""
        for obj in list(self.objects.values()):
            if not obj._started:
                await obj.start()

    def close(self) -> None:
        """Close every space's object."""
        for obj in self.objects.values():
            obj.close()

    async def __aenter__(self) -> SimulatedDeployment:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def run_alarms(
        self, until: int | None = None, max_passes: int = DEFAULT_MAX_PASSES
    ) -> list[PassReport]:
        """Fire the spaces' alarms like the platform, earliest first, until every slot is
        empty or later than ``until``; see :meth:`SimulatedObject.run_alarms`.

        Returns the reports of the passes that completed, in order. Raises
        :class:`QuiescenceError` after ``max_passes`` passes (all spaces together) when an
        alarm is still due.
        """
        completed: list[PassReport] = []
        passes = 0
        while True:
            due = await self._earliest()
            if due is None or (until is not None and due[0] > until):
                break
            if passes >= max_passes:
                slot, name = due
                raise QuiescenceError(
                    f"space {name!r}: " + self.objects[name]._not_quiescent(max_passes, slot))
            passes += 1
            report = await self._fire(*due)
            if report is not None:
                completed.append(report)
        if until is not None and until > self.clock.now_ms():
            self.clock.set(until)
        return completed

    async def fire_next(self) -> tuple[str, PassReport | None] | None:
        """Fire the earliest alarm of any space (the clock jumps to it): that space and its
        pass's report (None when the object was lost in it); None when no alarm is set."""
        due = await self._earliest()
        if due is None:
            return None
        return due[1], await self._fire(*due)

    async def _earliest(self) -> tuple[int, str] | None:
        # A space made by a delivery during the last pass is started before its alarm is read.
        await self.start()
        slots = [(int(obj.alarm_at), name) for name, obj in self.objects.items()
                 if obj.alarm_at is not None]
        return min(slots) if slots else None

    async def _fire(self, slot: int, name: str) -> PassReport | None:
        obj = self.objects[name]
        if slot > self.clock.now_ms():
            self.clock.set(slot)
        obj.storage.take_due_alarm(self.clock.now_ms())
        return await obj._fire()

    def crash_at(self, space: str, location: str, occurrence: int = 1) -> Crash:
        """Lose the object of ``space`` at the ``occurrence``-th arrival at failpoint
        ``location`` (see :meth:`SimulatedObject.crash_at`)."""
        return self.space(space).crash_at(location, occurrence)

    def fail_deliveries(
        self, times: int = 1, *, to_space: str | None = None,
        error: type[Exception] = ConnectionError,
    ) -> DeliveryFailure:
        """Make the next ``times`` deliveries (into ``to_space``, or any) raise ``error`` in
        transit, before the target sees them, as an unreachable object would."""
        failure = DeliveryFailure(to_space, times, error)
        self._failures.append(failure)
        return failure

    async def route(self, envelope: MessageEnvelope) -> Verdict:
        """Deliver one message to its target space's object (the router's work)."""
        for failure in self._failures:
            if failure.remaining > 0 and failure.to_space in (None, envelope.to_space):
                failure.remaining -= 1
                self.deliveries.append(Delivery(envelope.message_id, envelope.to_space, None))
                raise failure.error(f"injected delivery failure to {envelope.to_space!r}")
        target = self.space(envelope.to_space)
        if not target._started:
            await target.start()
        try:
            verdict = target.space.admit_message(
                envelope.message_id, envelope.to_thread, envelope.agent, envelope.input_json)
        except BaseException as exc:
            if not is_eviction(exc):
                raise
            # The target was lost while admitting: the caller sees a failed call.
            self.deliveries.append(Delivery(envelope.message_id, envelope.to_space, None))
            await target.evict()
            raise ConnectionError(f"space {envelope.to_space!r} was reset") from None
        self.deliveries.append(Delivery(envelope.message_id, envelope.to_space, verdict))
        return verdict


class ThreadHarness:
    """Drives the thread runtime directly, without the maintenance pass.

    For tests of the runtime itself: :meth:`step` recovers a Thread and runs its head once,
    :meth:`drive` repeats that until nothing changes (time does not move). ``evict()`` drops
    every in-memory part (scheduler, gate, failpoints, runtime, registry) and rebuilds them from
    the same storage, as a new incarnation would. ``make_app`` is called for each incarnation.
    """

    def __init__(
        self,
        storage: SqliteStorage,
        clock: ManualClock,
        make_app: Callable[[], Application],
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.make_app = make_app
        self.incarnation = 0
        self.build()

    def build(self) -> None:
        """Build one incarnation over the storage."""
        self.incarnation += 1
        self.app = self.make_app()
        self.rng = random.Random(self.incarnation)
        self.failpoints = Failpoints()
        self.scheduler: Scheduler = build_scheduler(
            self.storage, self.clock, self.app.config, self.rng, self.failpoints
        )
        self.scheduler.gate.ensure_alarm()
        self.runtime = ThreadRuntime(
            self.storage,
            self.app.agents,
            gate=self.scheduler.gate,
            failpoints=self.failpoints,
            config=self.app.config,
            clock=self.clock,
            rng=self.rng,
            ids=RandomIds(random.Random(1000 + self.incarnation)),
        )
        self.ledger = self.runtime.ledger

    def evict(self) -> None:
        """Lose the object: rebuild every in-memory part from the same storage."""
        self.build()

    def admit(
        self, thread: str, input: Any, *, agent: str = "echo", key: str | None = None
    ) -> Submission:
        """Admit ``input`` for ``agent`` on ``thread``."""
        admitted = self.ledger.admit(thread, agent, input, key).submission
        if not isinstance(admitted, Submission):
            raise Conflict(f"idempotency key {key!r} names a scheduled submission",
                           field="idempotency_key")
        return admitted

    def get(self, submission_id: str) -> Submission:
        """Read one submission."""
        return self.ledger.get(submission_id)

    async def step(self, thread: str) -> tuple[RecoverySweepResult, Settlement | None]:
        """What one pass does for one Thread: recover it, then run its head once."""
        recovered = self.runtime.run_recovery(thread)
        settled = await self.runtime.process_thread_head(thread)
        return recovered, settled

    async def drive(self, *, rounds: int = 50) -> list[Settlement]:
        """Run every Thread until nothing changes any more (time does not move)."""
        settled: list[Settlement] = []
        for _ in range(rounds):
            before = self.ledger.scan_nonterminal()
            for thread in sorted({item.thread_id for item in before}):
                _, settlement = await self.step(thread)
                if settlement is not None:
                    settled.append(settlement)
            if self.ledger.scan_nonterminal() == before:
                return settled
        raise QuiescenceError("the runtime did not quiesce")

    def settled_records(self, submission_id: str) -> int:
        """How many ``submission.settled`` records the Thread's log holds for the submission."""
        row = self.storage.exec(_SETTLED_RECORDS, f"{submission_id}:settled").one()
        return int(row["n"])


class SettlementLog:
    """Counts every settle transition that reported success, per submission.

    Counting settlement records in the log shows a second settlement only once it got as far
    as writing its record.
    This log wraps the transition itself: a second settlement of one submission that reported
    success shows here as 2.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def install(self, monkeypatch: Any) -> SettlementLog:
        """Wrap ``transitions.settle`` for the rest of the test (pytest's ``monkeypatch``
        fixture undoes it)."""
        real = transitions.settle

        def counting(storage: Any, submission_id: str, **kwargs: Any) -> bool:
            settled = real(storage, submission_id, **kwargs)
            if settled:
                self.counts[submission_id] = self.counts.get(submission_id, 0) + 1
            return settled

        monkeypatch.setattr(transitions, "settle", counting)
        return self

    def count(self, submission_id: str) -> int:
        """How many times the submission was settled since :meth:`install`."""
        return self.counts.get(submission_id, 0)


__all__ = [
    "DEFAULT_MAX_PASSES",
    "AlarmInvariantError",
    "Crash",
    "Delivery",
    "DeliveryFailure",
    "Effects",
    "QuiescenceError",
    "SettlementLog",
    "SimulatedDeployment",
    "SimulatedObject",
    "StatementFailure",
    "ThreadHarness",
    "alarm_invariant_problem",
    "is_eviction",
]
