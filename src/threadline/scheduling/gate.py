"""The mutation gate: every producer of maintenance work goes through it.

The alarm invariant: a committed mutation that creates actionable work commits, in the same
storage transaction, its source facts, the enrollment of the lanes it feeds, a newer generation
(when it may create native work) and an alarm no later than ``max(earliest due, now +
min_delay)``. Eviction between any two statements therefore loses nothing: either none of it
happened or the alarm will find it.

The maintenance pass's own native work (inside :meth:`MutationGate.native_source`) is held
to its crash fallback instead: when the pass begins it makes the native lane due at begin +
the backoff of the stalls so far, and its own progress then arms only an empty slot, at that
fallback, so an object lost mid-pass wakes up by then (a native deadline of its own earlier
than the fallback is enrolled as anywhere else). The exception is the progress that drops a
native retry the pass began under: it ends the backoff, so it makes the native lane due now
and arms the alarm by now + min_delay, as any progress does.

A producer whose body awaits cannot hold a transaction open, so :meth:`MutationGate.mutation`
*prearms* first (enrollment, generation and alarm commit before the body runs) and tracks the
body in memory until it ends; a pass may neither acknowledge the generation nor complete a lane
enrolled by a mutation still in flight. That tracking is a cache: after eviction the durable
prearm alone keeps the work due.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from contextvars import ContextVar
from itertools import islice
from typing import TypeVar

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import SchedulingError
from threadline.scheduling import state
from threadline.scheduling.alarm import AlarmService
from threadline.scheduling.due_queue import (
    NATIVE,
    PUBLICATION,
    RECOVERY_EVENTS,
    DueQueue,
    validate_lane_id,
)
from threadline.scheduling.failpoints import Failpoints
from threadline.storage.port import Storage

T = TypeVar("T")

#: How many generation advances the gate remembers the Threads of (see
#: :meth:`MutationGate.changed_threads`); a pass that falls further behind rescans everything.
TOUCHED_REMEMBERED = 1_024

# The lanes of the mutations enclosing the running code, so that record_progress in a body
# also covers what its boundary enrolled.
_current_lanes: ContextVar[frozenset[str]] = ContextVar(
    "threadline_mutation_lanes", default=frozenset()
)
# True inside the maintenance pass's own native work (its recoveries and Attempts): the pass
# certifies those source changes itself after its Attempts join, so they must not advance the
# generation it is about to acknowledge (each pass would otherwise cost one more pass).
_native_source: ContextVar[bool] = ContextVar("threadline_native_source", default=False)
# The crash-fallback deadline of the pass running that native work (None: not known).
_crash_fallback: ContextVar[int | None] = ContextVar("threadline_crash_fallback", default=None)
# False when that pass began with no native retry recorded: nothing for its progress to clear.
_retry_recorded: ContextVar[bool] = ContextVar("threadline_retry_recorded", default=True)
# The Threads whose work the enclosing mutate() may change, when its producer named them (None:
# not known). A generation advance made inside is attributed to them.
_current_threads: ContextVar[frozenset[str] | None] = ContextVar(
    "threadline_mutation_threads", default=None
)


class MutationGate:
    """Prearm/acknowledge boundary shared by every producer and the maintenance pass.

    One instance per object incarnation; everything it keeps in memory (active mutations,
    revision) is rebuilt empty after eviction, which is safe because the durable prearm stays.
    """

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        config: RuntimeConfig,
        due_queue: DueQueue,
        alarm: AlarmService,
        failpoints: Failpoints,
        *,
        publication_required: bool = False,
    ) -> None:
        #: Whether some destination requires publication before dependent native work: then
        #: publication progress is native progress too.
        self.publication_required = publication_required
        #: Whether a pass drains the publication lane (a subscriber is declared). While
        #: neither this nor :attr:`publication_required` holds, nothing would drain the lane,
        #: so it is never enrolled; with this alone, only a fact committed outside a pass
        #: enrolls it.
        self.publication_drained = False
        self._storage = storage
        self._clock = clock
        self._config = config
        self._queue = due_queue
        self._alarm = alarm
        self._failpoints = failpoints
        self._active = 0
        self._lanes: Counter[str] = Counter()
        self._revision = 0
        self._generations = 0
        # The Threads named by each of the latest generation advances (None: not named).
        self._touched: deque[frozenset[str] | None] = deque(maxlen=TOUCHED_REMEMBERED)
        self._waiters: list[asyncio.Future[None]] = []

    # -- producers -------------------------------------------------------------------------

    def mutate(
        self,
        fn: Callable[[], T],
        *,
        lanes: Iterable[str] = (),
        invalidates_recovery: bool = True,
        threads: Iterable[str] | None = None,
    ) -> T:
        """Run ``fn`` in one transaction with its enrollment, generation bump and alarm.

        ``invalidates_recovery`` enrolls the native lane and advances ``dirty`` (new native
        work may exist); ``lanes`` are the other lanes ``fn`` feeds. Their enrollment is not
        progress: ``fn`` calls :meth:`record_progress` when it commits a real new fact. If
        ``fn`` raises, nothing of it, the enrollment or the alarm is committed. Inside an open
        transaction it becomes part of it.

        ``threads`` names every Thread whose open work ``fn`` may change (None: not known). A
        running pass then reads just those again (:meth:`changed_threads`), so a producer
        that names too few loses work for that pass: name none when in doubt.
        """
        enrolled = self._lane_set(lanes, invalidates_recovery)
        named = None if threads is None else _thread_set(threads)
        self._failpoints.hit("maintenance:dirty:before")

        def body() -> T:
            attributed = _current_threads.set(named)
            try:
                self._prearm(enrolled, invalidates_recovery)
                token = _current_lanes.set(_current_lanes.get() | enrolled)
                try:
                    return fn()
                finally:
                    _current_lanes.reset(token)
            finally:
                _current_threads.reset(attributed)

        result = self._storage.transaction(body)
        self._notify()
        self._failpoints.hit("maintenance:dirty:after")
        return result

    @asynccontextmanager
    async def mutation(
        self, *, lanes: Iterable[str] = (), invalidates_recovery: bool = True
    ) -> AsyncIterator[None]:
        """``async with`` boundary for a producer whose body awaits.

        Prearm commits first (enrollment, generation, alarm); then the body runs, committing
        its facts in its own transactions (calling :meth:`record_progress` for real new facts);
        while it is in flight a pass cannot acknowledge the generation or complete its lanes.
        Raises :class:`SchedulingError` inside an open transaction, because the prearm could not
        commit before the body.
        """
        if self._storage.in_transaction():
            raise SchedulingError("gate.mutation() must start outside a storage transaction")
        enrolled = self._lane_set(lanes, invalidates_recovery)
        await self._failpoints.reached("maintenance:dirty:before")
        if enrolled:
            self._storage.transaction(lambda: self._prearm(enrolled, invalidates_recovery))
        # Counted in the same synchronous step as the commit: a snapshot never sees the
        # prearm without the mutation that owns it.
        self._active += 1
        held = set(enrolled)
        self._lanes.update(held)
        token = _current_lanes.set(_current_lanes.get() | enrolled)
        try:
            self._notify()
            await self._failpoints.reached("maintenance:dirty:after")
            await self._failpoints.reached("maintenance:mutation:armed")
            yield
            # The body committed: other lanes may now be completed by a wave, while native
            # certification keeps waiting until the mutation is fully released.
            self._release(held, keep=frozenset({NATIVE, PUBLICATION}))
            self._notify()
            await self._failpoints.reached("maintenance:mutation:finished")
        finally:
            # An abandoned body may be finalised from another context; the lanes view then
            # belongs to a context that no longer runs, so there is nothing to restore.
            with suppress(ValueError):
                _current_lanes.reset(token)
            self._release(held)
            self._active = max(0, self._active - 1)
            self._notify()

    def schedule(self, lane_id: str, due_at: int, progress_cursor: int | None = None) -> None:
        """Enroll ``lane_id`` due at ``due_at`` and ensure the alarm, atomically.

        Without a cursor it never accelerates the lane past its retry floor. With one, a
        strictly newer cursor is progress (replenishing the lane); progress on the native or
        publication lane also advances the generation. Inside an open transaction it commits
        with the caller's facts; outside it is its own transaction.
        """
        validate_lane_id(lane_id)

        def enroll() -> None:
            now = self._clock.now_ms()
            if progress_cursor is None and lane_id == NATIVE and _native_source.get():
                # The pass's own native deadline (a claim's lease deadline, say). When it is
                # no earlier than the pass's crash fallback the lane is due by then already
                # (the pass set it at its begin, and everything else that moves it before the
                # checkpoint moves it earlier), so the enrollment is not even tried; when the
                # lane is already due sooner the enrollment writes nothing. Either way the
                # alarm is the pass's to decide: only an empty slot is armed.
                fallback = _crash_fallback.get()
                if ((fallback is not None and due_at >= fallback)
                        or not self._queue.enroll(lane_id, due_at)):
                    self._arm(now, False)
                    return
            elif progress_cursor is None:
                self._queue.enroll(lane_id, due_at)
            elif self._queue.progress(lane_id, due_at, progress_cursor) and lane_id in (
                NATIVE,
                PUBLICATION,
            ):
                # Required publication is progress for the native work that depends on it.
                if lane_id == PUBLICATION:
                    self._queue.enroll(NATIVE, due_at, progress=True)
                state.bump_dirty(self._storage, clear_retry=True)
                self._advance()
            self._alarm.ensure_due(now)

        self._storage.transaction(enroll)
        self._notify()

    def record_progress(self, lanes: Iterable[str]) -> None:
        """Record that the current source transaction committed a real new fact for ``lanes``.

        Also covers the lanes of the enclosing :meth:`mutate` / :meth:`mutation`. Progress
        makes the lanes due now and replenishes their retry budget; native progress advances
        the generation, except inside :meth:`native_source`, where it never advances it (the
        pass certifies its own work) and enrolls the native lane only when it drops the
        native retry the pass began under: that ends the backoff, so a pass lost afterwards
        is retried after ``min_delay``, not at its crash fallback. Otherwise it only arms an
        empty slot (see :meth:`_arm`). Publication is enrolled only while
        ``publication_required`` or ``publication_drained``. Raises :class:`SchedulingError`
        outside a transaction, where the progress could commit without its fact (or the fact
        without its alarm).
        """
        if not self._storage.in_transaction():
            raise SchedulingError("record_progress() must run inside the source transaction")
        affected = set(self._lane_set(lanes, False)) | _current_lanes.get()
        if PUBLICATION in affected:
            if self.publication_required:
                affected.add(NATIVE)
            elif not self._drains_publication():
                affected.discard(PUBLICATION)
        if not affected:
            return
        now = self._clock.now_ms()
        inside_pass = _native_source.get()
        enrolled = sorted(affected - {NATIVE}) if inside_pass else sorted(affected)
        for lane_id in enrolled:
            self._queue.enroll(lane_id, now, progress=True)
        if NATIVE in affected:
            if inside_pass:
                if _retry_recorded.get() and state.clear_retry(self._storage):
                    # This progress ends the backoff the pass began under: should the object
                    # be lost before the checkpoint, the rest is due now, not at the pass's
                    # crash fallback (begin + backoff). Only the progress that drops the
                    # retry pays for it; the pass still certifies its work (no generation).
                    self._queue.enroll(NATIVE, now, progress=True)
                    enrolled.append(NATIVE)
            else:
                state.bump_dirty(self._storage, clear_retry=True)
                self._advance()
        if enrolled:
            # A progress enrollment makes its lane due now at the latest, so the earliest due
            # lane is at or before now and the bound is now + min_delay: no queue read needed.
            self._alarm.ensure_by(now + self._alarm.min_delay_ms)
        else:
            self._arm(now, False)
        self._notify()

    def record_admission(self, threads: Iterable[str]) -> None:
        """Record that the current source transaction admitted input to ``threads``.

        New input is native work nobody has seen: the native lane is due now with a fresh
        retry budget, the generation advances (naming ``threads``, so a running pass reads
        just those again, see :meth:`changed_threads`) and the alarm is armed by now +
        min_delay, as :meth:`record_progress` does for native progress outside a pass. Unlike
        that, it does so inside :meth:`native_source` too: an agent admitting input
        (``turn.submit``) may feed a Thread the running pass neither read nor runs, and the
        pass must not certify that work as its own. Raises :class:`SchedulingError` outside
        a transaction, where the admission could commit without its alarm.
        """
        if not self._storage.in_transaction():
            raise SchedulingError("record_admission() must run inside the source transaction")
        named = _thread_set(threads)
        now = self._clock.now_ms()
        self._queue.enroll(NATIVE, now, progress=True)
        state.bump_dirty(self._storage, clear_retry=True)
        self._advance(named)
        self._alarm.ensure_by(now + self._alarm.min_delay_ms)
        self._notify()

    def schedule_fact(self, lane_id: str, due_at: int) -> None:
        """Make ``lane_id`` due at ``due_at`` for a new fact the current transaction commits.

        A new fact (a delayed submission, say) is progress for its lane: unlike
        :meth:`schedule` without a cursor, the lane's retry floor does not hold it back (a
        lane whose last wave named a later deadline, or that backs off, is due at ``due_at``
        all the same) and its retry budget refills. It never makes the lane due later than it
        already is. The alarm is armed by ``max(due_at, now + min_delay)``, without a queue
        read. The native lane is refused: its facts go through :meth:`record_progress` and
        :meth:`record_admission`. Raises :class:`SchedulingError` outside a transaction.
        """
        validate_lane_id(lane_id)
        if lane_id == NATIVE:
            raise SchedulingError("native work is recorded with record_progress()")
        if not self._storage.in_transaction():
            raise SchedulingError("schedule_fact() must run inside the source transaction")
        now = self._clock.now_ms()
        self._queue.enroll(lane_id, int(due_at), progress=True)
        self._alarm.ensure_by(max(int(due_at), now + self._alarm.min_delay_ms))
        self._notify()

    def ensure_alarm(self) -> None:
        """At start-up: make sure dirty native work, undelivered recovery events and enrolled
        lanes have an alarm. Reads O(1) rows: never the ledger.

        A dirty generation gets the native lane due at its pending retry's ``not_before`` if
        there is one (a failing generation keeps its backoff across restarts), else no later
        than now. Recovery events appended and not yet acknowledged get their lane enrolled if
        it is idle. Then the slot is ensured from the queue. Running it again changes nothing.
        """
        now = self._clock.now_ms()

        def ensure() -> None:
            state.ensure_state(self._storage)
            self._queue.register(NATIVE)
            current = state.read_state(self._storage)
            native = self._queue.get(NATIVE)
            if current.dirty > current.processed and native is not None:
                retry = current.pending_retry
                if retry is not None:
                    if native.due_at != retry.not_before:
                        self._queue.checkpoint_native(retry.not_before)
                elif native.due_at is None:
                    self._queue.checkpoint_native(now)
            if current.recovery_events_pending:
                events = self._queue.get(RECOVERY_EVENTS)
                if events is None or events.due_at is None:
                    self._queue.enroll(RECOVERY_EVENTS, now)
            self._alarm.ensure_due(now)

        self._failpoints.hit("maintenance:ensure:before")
        self._storage.transaction(ensure)
        self._failpoints.hit("maintenance:ensure:after")

    @contextmanager
    def native_source(
        self, crash_fallback: int | None = None, *, retry_recorded: bool = True
    ) -> Iterator[None]:
        """Mark the enclosed code as the maintenance pass's own native work.

        Inside it, native progress does not advance ``dirty``: the pass made the lane due at
        its crash fallback when it began, it acknowledges what its Attempts did after they
        join and sets the lane from what it then reads, and a producer outside the pass
        (another task) still advances the generation and so fences that acknowledgement.
        Nor does it enroll the native lane, and the alarm is only armed if the slot is empty
        (see :meth:`_arm`), except for the progress that drops a native retry (see
        :meth:`record_progress`). Other lanes are enrolled as anywhere else. Tasks created
        inside inherit the mark; usable around awaits.

        ``crash_fallback`` is the deadline the pass gave the native lane, where an empty slot
        is armed without reading the queue. ``retry_recorded=False`` says the generation
        record held no native retry when the pass began (nothing else records one before its
        checkpoint), so native progress skips clearing it.
        """
        token = _native_source.set(True)
        deadline = _crash_fallback.set(crash_fallback)
        recorded = _retry_recorded.set(retry_recorded)
        try:
            yield
        finally:
            with suppress(ValueError):
                _retry_recorded.reset(recorded)
                _crash_fallback.reset(deadline)
                _native_source.reset(token)

    # -- observers for the pass ------------------------------------------------------------

    def active_lanes(self) -> frozenset[str]:
        """Lanes enrolled by mutations still in flight; a pass must not complete them."""
        return frozenset(self._lanes)

    @property
    def active(self) -> int:
        """How many :meth:`mutation` bodies are in flight."""
        return self._active

    @property
    def generations(self) -> int:
        """In-memory count of generation advances made through this gate (a hint).

        A running pass compares it to notice, without a storage read, that a producer outside
        the pass may have created native work; the durable ``dirty`` stays the authority. A
        rolled-back transaction may have counted one: a spurious hint only costs a rescan.
        """
        return self._generations

    def changed_threads(self, since: int) -> frozenset[str] | None:
        """The Threads named by the generation advances after :attr:`generations` was
        ``since``, or None when some of them cannot be told: a producer named none (see
        :meth:`mutate`), or more advances were made than the gate remembers.

        A running pass reads just these again instead of all open work. Like the count, a
        hint: a rolled-back transaction may have named a Thread it did not change.
        """
        missed = self._generations - since
        if missed <= 0:
            return frozenset()
        if missed > len(self._touched):
            return None
        changed: set[str] = set()
        for threads in islice(reversed(self._touched), missed):
            if threads is None:
                return None
            changed.update(threads)
        return frozenset(changed)

    @property
    def revision(self) -> int:
        """In-memory change counter; bumped by every producer commit and mutation release."""
        return self._revision

    async def await_change(self, revision: int) -> None:
        """Return once :attr:`revision` differs from ``revision`` (at once if it already does)."""
        await self.changed(revision)

    def changed(self, revision: int) -> asyncio.Future[None]:
        """A future resolved once :attr:`revision` differs from ``revision`` (already resolved
        if it does): for ``asyncio.wait`` beside other work, without a task of its own.
        Cancelling it is how a waiter stops waiting."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if revision != self._revision:
            waiter.set_result(None)
        else:
            self._waiters.append(waiter)
        return waiter

    @contextmanager
    def snapshot(self) -> Iterator[int]:
        """Yield the number of mutations in flight, for a pass's acknowledge/final decision.

        The body should be synchronous (one transaction): nothing can begin or end a mutation
        until it returns, so the count stays true for the decision it makes.
        """
        yield self._active

    # -- internals -------------------------------------------------------------------------

    def _drains_publication(self) -> bool:
        # Inside a pass the pass itself delivers what its Attempts append (its last round)
        # and then sets the lane from what is left: enrolling it per record would only write.
        return self.publication_drained and not _native_source.get()

    def _lane_set(self, lanes: Iterable[str], invalidates_recovery: bool) -> frozenset[str]:
        if isinstance(lanes, str):
            raise SchedulingError("lanes must be an iterable of lane ids, not one string")
        chosen = {validate_lane_id(lane) for lane in lanes}
        if not (self.publication_required or self._drains_publication()):
            chosen.discard(PUBLICATION)
        if invalidates_recovery:
            chosen.add(NATIVE)
        return frozenset(chosen)

    def _prearm(self, enrolled: frozenset[str], invalidates_recovery: bool) -> None:
        if not enrolled:
            return
        now = self._clock.now_ms()
        inside_pass = _native_source.get()
        # Enrollment is a crash fallback, not evidence that the body committed anything.
        lanes = sorted(enrolled - {NATIVE}) if inside_pass else sorted(enrolled)
        for lane_id in lanes:
            self._queue.enroll(lane_id, now)
        if invalidates_recovery and not inside_pass:
            state.bump_dirty(self._storage)
            self._advance()
        self._arm(now, bool(lanes))

    def _arm(self, now: int, enrolled: bool) -> None:
        """The producer half of the alarm invariant, after an enrollment (or a skipped one).

        Inside :meth:`native_source` the native lane is not enrolled: the pass made it due at
        its crash fallback when it began and sets it from what it reads at its checkpoint,
        and its final decision writes the slot exactly. The slot it found empty (the platform
        empties it when the alarm fires) still gets a deadline, so an object lost mid-pass
        wakes up again: the pass's crash fallback when it named one (no row read; a lane
        due sooner is then served at most that much late, and only if the object is lost),
        else the due queue's bound. Once armed, the pass's own native work leaves it alone,
        except the progress that drops a native retry (:meth:`record_progress` arms it by
        now + min_delay itself).
        """
        if enrolled:
            self._alarm.ensure_due(now)
        elif self._storage.known_alarm() is None:
            fallback = _crash_fallback.get()
            if fallback is None:
                self._alarm.ensure_due(now)
            else:
                self._alarm.ensure_by(max(fallback, now + self._alarm.min_delay_ms))

    def _advance(self, threads: frozenset[str] | None = None) -> None:
        """Count one generation advance, with ``threads`` or else the Threads the enclosing
        mutate() named."""
        self._generations += 1
        self._touched.append(threads if threads is not None else _current_threads.get())

    def _release(self, held: set[str], *, keep: frozenset[str] = frozenset()) -> None:
        for lane_id in list(held):
            if lane_id in keep:
                continue
            self._lanes[lane_id] -= 1
            if self._lanes[lane_id] <= 0:
                del self._lanes[lane_id]
            held.discard(lane_id)

    def _notify(self) -> None:
        self._revision += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)



def _thread_set(threads: Iterable[str]) -> frozenset[str]:
    """The Thread ids a producer names; one string is refused (it would name its letters)."""
    if isinstance(threads, str):
        raise SchedulingError("threads must be an iterable of Thread ids, not one string")
    return frozenset(threads)

__all__ = ["MutationGate"]
