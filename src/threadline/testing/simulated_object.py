"""The simulated object: run a threadline object in plain pytest, without workerd.

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
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
from collections import Counter
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.delivery.outbound import HttpPort
from threadline.errors import Evicted
from threadline.ids import RandomIds
from threadline.maintenance import PassReport
from threadline.scheduling import Failpoints
from threadline.space import Space
from threadline.storage import SqliteStorage
from threadline.testing.alarm_invariants import (
    AlarmInvariantError,
    QuiescenceError,
    alarm_invariant_problem,
)
from threadline.testing.storage_faults import (
    Crash,
    StatementFailure,
    _SimulatedStorage,
    is_eviction,
)
from threadline.threads import delayed
from threadline.threads import waits as wait_rows
from threadline.threads.ledger import Ledger
from threadline.threads.model import (
    ApprovalDecision,
    JsonValue,
    Resolution,
    ScheduledSubmission,
    Submission,
)
from threadline.threads.routing import MessageRouter
from threadline.threads.runtime import ThreadRuntime
from threadline.threads.waits import Wait

#: How many passes :meth:`SimulatedObject.run_alarms` fires before it gives up by default.
DEFAULT_MAX_PASSES = 1_000

# Event-loop turns without news before the clock moves, on a loop that hides its ready queue.
_BLIND_IDLE_TURNS = 20
_NO_DISK_SYNC = "PRAGMA synchronous = OFF"
_SUBMISSIONS = "SELECT id FROM tl_submissions ORDER BY thread_id, seq"
_THREAD_SUBMISSIONS = "SELECT id FROM tl_submissions WHERE thread_id = ? ORDER BY seq"


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


def _has_ready_callbacks(loop: asyncio.AbstractEventLoop) -> bool | None:
    """Whether any callback is ready to run on ``loop``; None when the loop does not say
    (only CPython's own event loop keeps its ready queue where this can see it)."""
    ready = getattr(loop, "_ready", None)
    return None if ready is None else len(ready) > 0


__all__ = ["DEFAULT_MAX_PASSES", "SimulatedObject"]
