"""Subscriber delivery: each declared subscriber is a durable cursor over the space's log.

The log is ``tl_history``; its ``pos`` (the rowid) orders the records of every Thread as they
were appended, so one cursor per subscriber (``tl_subscribers.cursor``, the ``pos`` of the last
record it consumed) says what it has had: the records past it, in ``pos`` order, which is log
order within each Thread. The maintenance pass delivers, through the one alarm:

* **Batches.** A subscriber gets up to ``batch`` records it wants (``kinds``) per call of its
  ``deliver``, and up to ``batch_bytes`` of records as JSON (the log is read in pages cut at
  that many bytes in SQL, so only those rows are materialised); a record larger than that
  comes alone, and ``/maintenance`` says what one too large for the destination does. A
  delivered batch is one row written: the cursor, moved past the batch in a compare-and-set.
  Records it does not want are stepped over in memory; the cursor row is written for them
  alone only once :data:`SKIP_PERSIST` of them have been stepped over.
* **At least once.** The cursor moves only after ``deliver`` returned, so a batch whose
  delivery was lost with the object (or whose cursor write was) is delivered again, whole, in
  the same order. A consumer deduplicates by ``record_id``.
* **Failures.** ``deliver`` raising backs the subscriber off (``base * 2^failures``, jittered,
  capped; an exception naming ``retry_after_ms``, as a webhook's ``Retry-After`` does, sets
  the delay instead, within the same cap); raising :class:`~threadline.DeliveryRefused`
  parks it with the refusal's detail, until an operator resumes, skips or restarts it
  (:mod:`~threadline.maintenance.subscriber_operations`), a start whose environment lifts the
  parking resumes it, or a deploy bumps its ``version``. A refusal that names one record of
  the batch (``record_id``: a Queue message over its size limit) first has the records
  before it delivered alone, so the parking is on that record. A required subscriber backs
  off or parks per Thread instead (see the gate below). Each delivery is bounded by
  ``dispatch_timeout`` on the injected clock; past it the coroutine is cancelled and, should
  it ignore that, abandoned after ``cancel_grace_ms`` (:mod:`threadline.abandonment`): it
  counts as a failure and never holds the pass. A parking is logged once.
* **Waves.** A subscriber gets at most :data:`WAVE_BATCHES` batches per round, each bounded by
  its ``dispatch_timeout``, and a pass runs two rounds at most, both beside native work: one
  from its start, one once it is done and no Attempt runs (for what the pass's own Attempts
  appended). Native dispatch never waits for a round: it goes on while one runs, input
  admitted meanwhile included (a caught-up pass whose waves run long becomes actionable when
  a producer commits). A subscriber still behind then makes the ``threadline:publication``
  lane due (now, or at its retry time), so a backfill from the beginning goes on wave after
  wave, one pass each, and never holds native work.
* **The required gate.** A ``required=True`` subscriber is the reference's publication: a
  Thread's next native work waits until every required subscriber has consumed that Thread's
  committed records (those it wants). It is decided per Thread, right before the Thread is
  chosen and again right before its Attempt starts, so a record any producer committed
  meanwhile is never overtaken, and at a cost that does not grow with the log
  (:mod:`threadline.maintenance.required_gate`). A required subscriber's failed batch holds
  the Thread of its first record (:mod:`threadline.maintenance.publication_holds`): that
  Thread's records are delivered alone at its retry time (or never, while it is parked on
  it), and the cursor goes on over every other Thread's. So a destination failing on one
  Thread's records holds that Thread's native work and nothing else.
* **Declarations.** At a start whose declarations changed (see :func:`subscribers_key`) a new
  subscriber's cursor is written (``start="beginning"``: 0; ``"now"``: the log's end), a bumped
  ``version`` starts over from the beginning with a fresh failure count (its holds dropped),
  and the cursor of a subscriber this deployment no longer declares is dropped (its holds too)
  with one log line. Native work is looked at again then: what a required subscriber removed
  or made optional held runs. At every start a subscriber parked for something only the
  environment lacked (a webhook's secret, a Queue binding) whose environment now has it
  resumes from its cursor (:meth:`Publication.resume`, which reads the parked rows only).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from functools import partial
from typing import Any

from threadline.abandonment import Abandoned, contained
from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.delivery.outbound import HttpPort
from threadline.delivery.subscribers import (
    DeliveryContext,
    Subscribers,
    SubscriberSpec,
    parking_lifted,
    retry_after_of,
)
from threadline.errors import DeliveryRefused, Evicted, ThreadlineError
from threadline.maintenance.publication_report import PublicationReport
from threadline.maintenance.required_gate import (
    Hold,
    drop_holds,
    read_holds,
    unpark_hold,
)
from threadline.maintenance.subscriber_cursors import (
    SKIP_PERSIST,
    Batch,
    SubscriberRow,
    drop_row,
    insert_row,
    log_end,
    position_of,
    read_batch,
    read_parked,
    read_rows,
    restart_row,
    resume_row,
    subscribers_key,
    write_delivered,
    write_failed,
    write_parked,
)
from threadline.scheduling import NATIVE, PUBLICATION, DueQueue, backoff_ms
from threadline.scheduling.failpoints import PUBLICATION_LOCATIONS, Failpoints
from threadline.storage.port import Storage
from threadline.threads.records import Record

_logger = logging.getLogger("threadline.maintenance")

#: Batches one subscriber gets per round of a pass: the bound of a backfill wave.
WAVE_BATCHES = 10
#: Reached right before a batch's ``deliver`` is called, and after it returned (before its
#: cursor is written).
DELIVERING, DELIVERED = PUBLICATION_LOCATIONS


class Publication(PublicationReport):
    """Delivery to the declared subscribers, driven by the maintenance pass.

    ``space`` is the name of the space every
    :class:`~threadline.delivery.subscribers.DeliveryContext` carries (``""`` while the object
    does not know it); the :class:`~threadline.space.Space` sets it once it learns the name.
    """

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        config: RuntimeConfig,
        rng: random.Random,
        subscribers: Subscribers,
        queue: DueQueue,
        failpoints: Failpoints,
        *,
        space: str = "",
        env: Any = None,
        http: HttpPort | None = None,
        log: Callable[[str], None] | None = None,
        open_work: Callable[[str], list[str]] | None = None,
    ) -> None:
        self._storage = storage
        #: A Thread's open submissions, for the readout of the work a required subscriber holds.
        self._open_work = open_work if open_work is not None else (lambda thread_id: [])
        self._clock = clock
        self._config = config
        self._rng = rng
        self._specs = subscribers
        self._queue = queue
        self._fp = failpoints
        self.space = space
        self.env = env
        self.http = http
        self._log = log if log is not None else _logger.error
        #: The rows as last read or written by this incarnation (None: not read yet).
        self._rows: dict[str, SubscriberRow] | None = None
        #: The Threads each subscriber is held on (read with the rows, then kept).
        self._holds: dict[str, dict[str, Hold]] = {}
        #: How far each subscriber has read, past its durable cursor, over records it does
        #: not want (or that a hold of its owes).
        self._read: dict[str, int] = {}
        self._abandoned = Abandoned()
        #: Subscribers whose wave of the running pass is used up.
        self._spent: set[str] = set()
        #: Waiting for the next delivered batch (native dispatch, for the Threads it gates).
        self._waiters: list[asyncio.Future[None]] = []
        #: Batches delivered and the rows their cursors wrote, per subscriber (this
        #: incarnation): what the bench prints.
        self.batches: dict[str, int] = {}
        self.cursor_writes: dict[str, int] = {}

    @property
    def declared(self) -> bool:
        """Whether the deployment declares any subscriber."""
        return len(self._specs) > 0

    @property
    def abandoned(self) -> int:
        """Deliveries abandoned after a cancellation they ignored, still running."""
        return len(self._abandoned)

    # -- start-up --------------------------------------------------------------------------

    def reconcile(self) -> None:
        """At a start whose declarations changed: write new cursors, start bumped versions
        over, drop the cursors (and holds) of subscribers no longer declared (one log line
        each), make the publication lane due when some subscriber is behind, and native work
        due when some subscriber was declared before (a required one removed or made optional
        releases what it held)."""
        now = self._clock.now_ms()

        def apply() -> tuple[list[SubscriberRow], bool]:
            rows = read_rows(self._storage)
            before = dict(rows)
            end = log_end(self._storage)
            for spec in self._specs:
                row = rows.get(spec.name)
                if row is None:
                    cursor = 0 if spec.start == "beginning" else end
                    insert_row(self._storage, spec.name, spec.version, cursor)
                    rows[spec.name] = SubscriberRow(spec.name, spec.version, cursor, "active")
                elif row.version != spec.version:
                    restart_row(self._storage, spec.name, spec.version)
                    drop_holds(self._storage, spec.name)
                    rows[spec.name] = SubscriberRow(spec.name, spec.version, 0, "active")
            woken = any(spec.required and rows[spec.name].cursor < end
                        and rows[spec.name] is not before.get(spec.name)
                        for spec in self._specs)
            removed = [row for name, row in sorted(rows.items()) if self._specs.get(name) is None]
            for row in removed:
                drop_row(self._storage, row.name)
                drop_holds(self._storage, row.name)
                del rows[row.name]
            holds = read_holds(self._storage)
            behind = any(not row.parked and row.cursor < end for row in rows.values()) or any(
                not hold.parked for held in holds.values() for hold in held.values())
            if behind:
                self._queue.set_due(PUBLICATION, now)
            if woken or before:
                # A required subscriber starts (over), or one this deployment no longer
                # declares as required may have held native work (under a parking, say):
                # that work is looked at again, and runs once nothing holds it.
                self._queue.set_due(NATIVE, now)
            self._rows = rows
            self._holds = holds
            return removed, behind

        removed, _ = self._storage.transaction(apply)
        self._read.clear()
        for row in removed:
            self._log(
                f"threadline: subscriber {row.name!r} is not declared in this deployment; "
                f"its cursor (at {row.cursor}, {row.delivered} batches delivered) is dropped"
            )

    def resume(self) -> list[str]:
        """At start: unpark each subscriber (or a required one's parked hold of a Thread) whose
        parking this incarnation's environment lifts
        (:func:`~threadline.delivery.subscribers.parking_lifted`), where it stands, and make
        the lanes due that it may serve or have held; return the names of the subscribers
        resumed (one log line each, naming no value of the environment)."""
        if not self.declared:
            return []
        lifted = [row for row in read_parked(self._storage)
                  if (spec := self._specs.get(row.name)) is not None
                  and parking_lifted(spec, row.detail, self.env)]
        lifted_holds = [hold for name, held in read_holds(self._storage).items()
                        if (spec := self._specs.get(name)) is not None
                        for hold in held.values()
                        if hold.parked and parking_lifted(spec, hold.detail, self.env)]
        if not lifted and not lifted_holds:
            return []
        now = self._clock.now_ms()
        held = bool(lifted_holds) or any(
            spec.required for spec in self._specs if spec.name in {row.name for row in lifted})

        def apply() -> tuple[list[SubscriberRow], list[Hold]]:
            resumed = [row for row in lifted
                       if resume_row(self._storage, row.name, row.version) == 1]
            unparked = [hold for hold in lifted_holds if unpark_hold(self._storage, hold) == 1]
            if resumed or unparked:
                self._queue.set_due(PUBLICATION, now)
                if held:
                    # The Threads it held are looked at again once it has drained.
                    self._queue.set_due(NATIVE, now)
            return resumed, unparked

        resumed, unparked = self._storage.transaction(apply)
        self._rows = None  # read again, holds with them
        for row in resumed:
            self._log(f"threadline: subscriber {row.name!r} resumes from its cursor (at "
                      f"{row.cursor}): this deployment's environment lifts its parking "
                      f"({row.detail})")
        for hold in unparked:
            self._log(f"threadline: subscriber {hold.name!r} resumes on thread "
                      f"{hold.thread_id!r}: this deployment's environment lifts its parking "
                      f"({hold.detail})")
        return sorted({row.name for row in resumed} | {hold.name for hold in unparked})

    # -- state -----------------------------------------------------------------------------

    def rows(self) -> dict[str, SubscriberRow]:
        """The declared subscribers' rows (read once per incarnation, then kept)."""
        if self._rows is None:
            self._rows = read_rows(self._storage)
            self._holds = read_holds(self._storage)
        missing = [spec for spec in self._specs if spec.name not in self._rows]
        if missing:
            # Declared, yet without a row: the start that would have written it was lost.
            self.reconcile()
            assert self._rows is not None
        return self._rows

    def _ready(self, row: SubscriberRow, now: int) -> bool:
        return not row.parked and (row.retry_at is None or row.retry_at <= now)

    def behind(self, end: int | None = None) -> bool:
        """Whether some subscriber that is not parked has records past its position, or a
        held Thread whose retry has come."""
        if not self.declared:
            return False
        rows = self.rows()
        if end is None:
            end = log_end(self._storage)
        now = self._clock.now_ms()
        return any(not row.parked and (self._position(row) < end
                                       or self._due_holds(row.name, now))
                   for row in rows.values() if self._specs.get(row.name) is not None)

    def ready_at(self, name: str, now: int) -> int | None:
        """When subscriber ``name`` can deliver again: ``now`` when it is ready, its retry
        time while it backs off, None while it is parked (or unknown)."""
        row = self.rows().get(name)
        if row is None or row.parked:
            return None
        return now if row.retry_at is None else max(now, int(row.retry_at))

    def next_due(self, now: int) -> int | None:
        """When the publication lane is next due: now for a subscriber behind and ready, its
        retry time for one backing off, a held Thread's retry time; None when every one is
        caught up or parked."""
        if not self.declared:
            return None
        end = log_end(self._storage)
        dues: list[int] = []
        for row in self.rows().values():
            if self._specs.get(row.name) is None or row.parked:
                continue
            ready = now if row.retry_at is None else max(now, int(row.retry_at))
            if self._position(row) < end:
                dues.append(ready)
            dues.extend(max(ready, int(hold.retry_at or now))
                        for hold in self.holds(row.name).values() if not hold.parked)
        return min(dues, default=None)

    def settle_lane(self, now: int) -> None:
        """Set the publication lane from what is left to deliver (one write, only on a
        change)."""
        due = self.next_due(now)
        self._storage.transaction(lambda: self._queue.set_due(PUBLICATION, due))

    def progressed(self) -> asyncio.Future[None]:
        """A future done at the next delivered batch (a Thread a required subscriber gated
        may be free then)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters = [*(w for w in self._waiters if not w.done()), waiter]
        return waiter

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- delivery --------------------------------------------------------------------------

    def begin_pass(self) -> None:
        """A pass begins: every subscriber has its whole wave again."""
        self._spent.clear()

    async def round(self, until: int) -> bool:
        """One round: each ready subscriber that has not used up its wave in this pass gets
        up to :data:`WAVE_BATCHES` batches (a held Thread whose retry came: its own, first),
        the subscribers concurrently; returns whether a batch was delivered."""
        if not self.declared:
            return False
        now = self._clock.now_ms()
        rows = self.rows()
        chosen = [spec for spec in self._specs
                  if spec.name not in self._spent
                  and spec.name in rows and self._ready(rows[spec.name], now)]
        if not chosen:
            return False
        end = log_end(self._storage)
        chosen = [spec for spec in chosen if self._position(rows[spec.name]) < end
                  or self._due_holds(spec.name, now)]
        results = await asyncio.gather(*(self._wave(spec, until) for spec in chosen))
        return any(results)

    async def _wave(self, spec: SubscriberSpec, until: int) -> bool:
        delivered = False
        tried: set[str] = set()
        for turn in range(WAVE_BATCHES):
            if turn == WAVE_BATCHES - 1:
                # Its wave for this pass is used up: a backfill goes on in the next one.
                self._spent.add(spec.name)
            now = self._clock.now_ms()
            if now + spec.dispatch_timeout_ms > until:
                break  # its allowance would outlast the event: the next one delivers it
            row = self.rows().get(spec.name)
            if row is None or not self._ready(row, now):
                break
            hold = next((hold for hold in self._due_holds(spec.name, now)
                         if hold.thread_id not in tried), None)
            if hold is not None:
                # A held Thread whose retry came: its own batch, before the others'. Should
                # it fail again, the others still get theirs.
                tried.add(hold.thread_id)
                delivered = await self._catch_up(spec, row, hold, now) or delivered
                continue
            batch = read_batch(self._storage, spec, self._position(row))
            if batch is None:
                break
            held = self.holds(spec.name)
            records = [record for record in batch.records if record.thread_id not in held]
            if not records:
                self._skip(spec, row, batch.through)
                continue
            if not await self._deliver(spec, row, Batch(records, batch.through), now, until):
                hold = held.get(records[0].thread_id)
                if hold is not None and hold.due(self._clock.now_ms()):
                    continue  # a refusal among several Threads: its first, alone, at once
                break
            delivered = True
            # A turn for native work and the other subscribers before the next batch.
            await self._clock.sleep_until(self._clock.now_ms())
        return delivered

    def _skip(self, spec: SubscriberSpec, row: SubscriberRow, through: int) -> None:
        """Step over records ``spec`` does not want (or a hold owes): in memory, written with
        the next batch, or alone once SKIP_PERSIST records were stepped over."""
        self._read[spec.name] = through
        if through - row.cursor >= SKIP_PERSIST:
            self._commit(spec, row, through, 0)

    async def _call(
        self, spec: SubscriberSpec, records: list[Record], now: int
    ) -> Exception | None:
        """Call ``spec``'s ``deliver`` with ``records`` under its ``dispatch_timeout``; the
        error it failed with, or None once it returned."""
        ctx = DeliveryContext(space=self.space, subscriber=spec.name, env=self.env,
                              http=self.http, now_ms=now)
        await self._fp.reached(DELIVERING)
        task = asyncio.ensure_future(contained(partial(spec.deliver, records, ctx)))
        timer = asyncio.ensure_future(self._clock.sleep_until(now + spec.dispatch_timeout_ms))
        try:
            await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # The pass itself is stopping (the event deadline, the object lost).
            timer.cancel()
            await self._abandoned.stop(task, self._clock, self._config.cancel_grace_ms)
            raise
        timer.cancel()
        if not task.done():
            await self._abandoned.stop(task, self._clock, self._config.cancel_grace_ms)
            return TimeoutError(
                f"delivery outran its dispatch_timeout of {spec.dispatch_timeout_ms} ms")
        if task.cancelled():
            return TimeoutError("delivery was cancelled")
        error = task.exception()
        if error is not None:
            if isinstance(error, Evicted):
                raise error
            if not isinstance(error, Exception):
                # A foreign BaseException (GeneratorExit, a custom subclass): the subscriber's
                # failure like any other.
                return RuntimeError(f"the subscriber raised {type(error).__name__}")
            return error
        await self._fp.reached(DELIVERED)
        return None

    async def _deliver(
        self, spec: SubscriberSpec, row: SubscriberRow, batch: Batch, now: int, until: int
    ) -> bool:
        """Deliver one batch; True when it was delivered and its cursor written. A required
        subscriber's failure holds the Thread of the batch's first record."""
        error = await self._call(spec, list(batch.records), now)
        if error is None:
            return self._commit(spec, row, batch.through, 1)
        if isinstance(error, DeliveryRefused):
            before = self._before_refused(batch, error.record_id)
            if before is not None:
                # The records before the one refused go alone first: it is then the one at
                # the cursor (or its Thread's hold), for an operator to skip exactly it.
                # Without the time, the next wave reads the batch again.
                again = self._clock.now_ms()
                if again + spec.dispatch_timeout_ms > until:
                    return False
                return await self._deliver(spec, row, before, again, until)
        if spec.required and self._hold(spec, list(batch.records), error):
            return False
        if isinstance(error, DeliveryRefused):
            return self._park(spec, row, error)
        return self._failed(spec, row, error)

    # -- the cursor ------------------------------------------------------------------------

    def _before_refused(self, batch: Batch, record_id: str | None) -> Batch | None:
        """The records of ``batch`` before the one a refusal names (None: it named none, or
        the first)."""
        ids = [record.record_id for record in batch.records]
        if record_id is None or record_id not in ids[1:]:
            return None
        kept = batch.records[:ids.index(record_id)]
        return Batch(kept, position_of(self._storage, kept[-1]))

    def _commit(self, spec: SubscriberSpec, row: SubscriberRow, through: int, batches: int) -> bool:
        now = self._clock.now_ms()
        try:
            changed = self._storage.transaction(lambda: write_delivered(
                self._storage, spec.name, row.version, row.cursor, through=through,
                batches=batches, now=now))
        except ThreadlineError as exc:
            # Delivered, but not recorded: the batch goes again (at least once), after a
            # backoff so that a failing disk does not make it spin.
            return self._failed(spec, row, exc)
        if changed != 1:
            self._rows = None  # someone else moved it (a redeploy's reset): read it again
            return False
        self._read.pop(spec.name, None)
        self.cursor_writes[spec.name] = self.cursor_writes.get(spec.name, 0) + 1
        self.batches[spec.name] = self.batches.get(spec.name, 0) + batches
        self._store(replace(row, cursor=through, failures=0, retry_at=None, error_type=None,
                            error=None, failed_at=None, delivered=row.delivered + batches,
                            delivered_at=now))
        if batches:
            self._notify()
        return True

    def _failed(self, spec: SubscriberSpec, row: SubscriberRow, error: Exception) -> bool:
        now = self._clock.now_ms()
        asked = retry_after_of(error)
        # A destination's own advice (Retry-After) replaces the backoff, within its ceiling and
        # never sooner than an alarm may be armed, so "retry now" cannot make it spin.
        delay = backoff_ms(row.failures, self._config, self._rng) if asked is None else min(
            self._config.alarm_backoff_cap_ms, max(asked, self._config.min_alarm_delay_ms))
        retry_at = now + delay
        message = str(error)[:500]
        when = "after a backoff" if asked is None else f"in {delay} ms, as its destination asked"
        self._log(f"threadline: subscriber {spec.name!r} failed to deliver a batch "
                  f"({type(error).__name__}); retried {when}")
        # Should storage refuse it, the backoff is kept in memory: this incarnation backs the
        # subscriber off all the same.
        with suppress(ThreadlineError):
            self._storage.transaction(lambda: write_failed(
                self._storage, spec.name, row.version, retry_at=retry_at,
                error_type=type(error).__name__, error=message, now=now))
        self._store(replace(row, failures=row.failures + 1, retry_at=retry_at,
                            error_type=type(error).__name__, error=message, failed_at=now))
        return False

    def _park(self, spec: SubscriberSpec, row: SubscriberRow, refusal: DeliveryRefused) -> bool:
        now = self._clock.now_ms()
        message = str(refusal)[:500]
        detail = None if refusal.detail is None else str(refusal.detail)[:2_000]
        try:
            self._storage.transaction(lambda: write_parked(
                self._storage, spec.name, row.version, error_type=type(refusal).__name__,
                error=message, detail=detail, now=now))
        except ThreadlineError:
            return self._failed(spec, row, refusal)
        self._store(replace(row, state="parked", failures=row.failures + 1, retry_at=None,
                            error_type=type(refusal).__name__, error=message, detail=detail,
                            failed_at=now, reported=False))
        self.report_parked()
        return False

    def _store(self, row: SubscriberRow) -> None:
        if self._rows is not None:
            self._rows[row.name] = row

    def spec(self, name: str) -> SubscriberSpec | None:
        """The declaration of subscriber ``name`` (None: this deployment declares none)."""
        return self._specs.get(name)

    def reread(self, name: str) -> None:
        """An operator moved the row of ``name``: read the rows again, forget what was
        stepped over in memory past its old cursor, and give it a whole wave again."""
        self._rows = None
        self._read.pop(name, None)
        self._spent.discard(name)



__all__ = [
    "DELIVERED",
    "DELIVERING",
    "PUBLICATION_LOCATIONS",
    "SKIP_PERSIST",
    "WAVE_BATCHES",
    "Publication",
    "SubscriberRow",
    "log_end",
    "read_rows",
    "subscribers_key",
]
