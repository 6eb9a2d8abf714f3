"""The maintenance pass: one alarm event runs every Thread toward settlement (DESIGN §4).

A pass

1. **begins** by reading the earliest due lane (one row). When no lane is due at all and
   the incarnation knows its generation processed (it certified or read it so, and the gate
   counted no advance since), that row is the whole begin. Otherwise it reads the generation
   record (one row) and, when a lane is due, the due lanes. Caught up (the generation is
   processed or its native retry is still ahead, and the native lane is not due): no ledger
   scan, no history read; only due lanes are served and the alarm decided.
2. Otherwise it is **actionable**: it scans open work (control columns only), recovers the
   Threads that need it (rotated by ``last_recovered_thread``), and dispatches heads, at most
   ``native_concurrency`` Threads at once, one head per Thread, round-robin after
   ``last_served_thread``; each dispatched Thread is recovered right before its Attempt. A
   Thread under a recovery fault, or parked on an unregistered agent, is skipped. Its own
   source changes are made under :meth:`MutationGate.native_source`, so they do not dirty
   the generation it is about to acknowledge. Storage refusing a cursor write fails the
   Thread the cursor names (it becomes that Thread's fault), never the pass.
3. Non-native lanes due at the start and not held by a mutation in flight get one bounded
   wave each, concurrently with native work (:mod:`threadline.maintenance.lanes`). Once an
   actionable pass's native work and those waves are done, a second round gives every lane
   then due a wave it has not had, but only if some lane was enrolled during the pass (a
   recovery event of its own, say) or one due at the start was held then. A lane that
   merely falls due by the clock during the pass does not start that round: the final
   decision arms the alarm for it, and the next pass serves it. Then, once every native
   Attempt has joined (even when native work failed: the failure is raised after them),
   each due ``after-native`` lane gets one wave, ``after_native_concurrency`` at a time,
   rotated by ``last_after_native_lane`` (:meth:`LaneRunner.run_after_native`). In every
   round a wave whose whole allowance no longer fits before the event deadline is not
   started: its lane stays due, uncharged, and the next event runs it from its start.
4. **Deadlines** on the injected clock: no new Attempt after ``yield_after_ms``; at
   ``event_deadline_ms`` Attempts still running are cancelled and count as lost (their
   claims are this incarnation's, but no longer active, so the next recovery takes them at once).
5. **Checkpoint**: with every Attempt joined, the observed generation is acknowledged only if
   no producer overlapped the pass and no autonomous work is owed now; work owed now that made
   no progress gets a durable native retry (``base * 2^stalls`` capped, jittered); the native
   lane is set to the earliest timed obligation. Input queued behind a suspended head is
   taken out of the live range there, until that head leaves the suspension.
6. **Finish**: the alarm is decided from the due queue under the gate's snapshot (a caught-up
   pass that ran no wave and saw no producer reuses the earliest due it read at the begin),
   written only where it differs from the slot (emptied by the firing, so a pass that armed
   nothing and owes no alarm writes nothing);
   a prompt-pass wake asked for during the pass is spent there (``max(now, earliest due)``
   instead of the minimum delay, see :meth:`AlarmService.schedule_now`). A retry record
   left by failures that no longer defers owed native work ends with this success; only the
   one found at the begin, never the one this pass's checkpoint wrote.

A pass that fails (a storage error, say) logs one content-free line, backs off durably and
returns normally, so the durable backoff replaces the platform's six automatic retries. A
failure in native work backs off the failed generation only. One outside it (before the begin
read the generation record, a failing registry reconcile, a refused final decision) served
nothing, so the whole pass waits: every lane due before the retry's ``not_before`` is deferred
to it. Either way the retry record counts the stalls (``base * 2^stalls`` capped, jittered),
so the gaps grow across evictions too, and a producer that raced the failure is never
postponed. Only a defect propagates, after the same re-arming; and should the re-arming
itself fail (storage unavailable, even for the record's read), that error propagates too,
leaving the platform's own retry as the last resort.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from contextlib import nullcontext, suppress
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import BindingUnavailable, ThreadlineError
from threadline.maintenance.bindings import BindingWaits
from threadline.maintenance.faults import Fault, RecoveryFaults
from threadline.maintenance.lanes import LaneRunner, WaveResult
from threadline.maintenance.publication_lane import Publication
from threadline.maintenance.report import PassPhase, PassReport, PassReports, failure_fields
from threadline.maintenance.view import Need, ThreadView, classify
from threadline.pause import Pause, no_pause
from threadline.scheduling import (
    NATIVE,
    PUBLICATION,
    AlarmDecision,
    Lane,
    NativeRetry,
    Scheduler,
    backoff_ms,
)
from threadline.scheduling import state as generation
from threadline.storage.port import Storage
from threadline.threads import transitions, waits
from threadline.threads.model import SubmissionState, WorkItem
from threadline.threads.recovery import Disposition, RecoveryBlocked, RecoverySweepResult
from threadline.threads.runtime import ThreadRuntime

_logger = logging.getLogger("threadline.maintenance")

BEGIN_BEFORE = "maintenance:begin:before"
BEGIN_AFTER = "maintenance:begin:after"
SELECT_BEFORE = "maintenance:select:before"
SELECT_AFTER = "maintenance:select:after"
BINDING_BEFORE = "maintenance:binding-retry:before"
BINDING_AFTER = "maintenance:binding-retry:after"
RECOVERY_STATUS_BEFORE = "maintenance:recovery-status:before"
RECOVERY_STATUS_AFTER = "maintenance:recovery-status:after"
RETRY_BEFORE = "maintenance:retry:before"
RETRY_AFTER = "maintenance:retry:after"
CHECKPOINT_BEFORE = "maintenance:checkpoint:before"
CHECKPOINT_AFTER = "maintenance:checkpoint:after"
FINISH_BEFORE = "maintenance:finish:before"
FINISH_AFTER = "maintenance:finish:after"


@dataclass(frozen=True, slots=True)
class MaintenanceParts:
    """What a pass works with: the object's scheduler, thread runtime, lanes, faults, waits."""

    storage: Storage
    clock: Clock
    config: RuntimeConfig
    rng: random.Random
    scheduler: Scheduler
    runtime: ThreadRuntime
    lanes: LaneRunner
    faults: RecoveryFaults
    bindings: BindingWaits
    log: Callable[[str], None] | None = None
    #: Delivery to the declared subscribers (None: the pass delivers nothing).
    publication: Publication | None = None
    #: Awaited between Attempts and before each lane wave (see :mod:`threadline.pause`).
    pause: Pause = no_pause


@dataclass
class _Observed:
    """What the pass observed at its begin; the failure path re-arms from it."""

    generation: int | None = None
    actionable: bool = False
    active_at_start: int = 0
    nonterminal: int = 0
    last_served: str | None = None
    last_recovered: str | None = None
    #: The earliest lane due at the begin (None: no lane due at all).
    earliest: int | None = None
    #: The native lane's crash-fallback deadline set at the begin of an actionable pass.
    fallback: int | None = None
    #: The native retry the generation record held at the begin (None: none); only it may end
    #: with the pass's success.
    retry_found: NativeRetry | None = None
    #: Whether that retry no longer deferred owed native work at the begin (a success ends it).
    retry_stale: bool = False
    #: The gate's revision when the pass last knew the producers' commits (a failure that a
    #: producer raced backs nothing off).
    revision: int = 0

    @property
    def retry_recorded(self) -> bool:
        """Whether the generation record held a native retry at the begin."""
        return self.retry_found is not None


@dataclass
class _Tally:
    recovered: int = 0
    repaired: bool = False
    settled: int = 0
    dispatched: int = 0
    nonterminal: int = 0
    cut_short: bool = False
    parked_lanes: bool = False
    waves: set[str] = field(default_factory=set)
    #: Threads whose fault transition storage refused in this pass (tried once per pass).
    unrecorded: set[str] = field(default_factory=set)


class _Scan:
    """The pass's view of open work, refreshed per Thread as its Attempts end.

    Only Threads with work that may be owed now are visited (see :meth:`Maintenance._open_work`).
    They are read in full at the start. After that a Thread is read again when the pass
    itself touched it (recovered, ran, or left running at a deadline; with the faults and
    binding waits the pass itself recorded), or when a producer outside the pass advanced
    the generation through the gate naming it (an admission, an abort, a decision: see
    :meth:`MutationGate.changed_threads`). Only an advance whose Threads the gate cannot tell
    makes the pass read all open work again. So neither a pass over many Threads nor input
    arriving during it costs a rescan of all open work per Attempt or per admission, and the
    checkpoint reads no more than what changed. The pass's own commits advance nothing; the
    gate's in-memory hint saves a storage read per Attempt, and the checkpoint still checks
    the durable generation.
    """

    def __init__(self, owner: Maintenance) -> None:
        self._owner = owner
        self._views: dict[str, ThreadView] = {}
        self._generations: int | None = None
        self._stale: set[str] = set()
        self._full = True
        self._first = True
        self._faults: dict[str, int] = {}
        #: Faulted Threads whose recovery succeeded in this pass (see :meth:`lift`).
        self._lifted: set[str] = set()
        self._parked: set[str] = set()
        #: When the last full scan read the due timers (see :meth:`scanned_at`).
        self._scanned_at: int | None = None
        #: Whether the binding waits were read (by the last full scan).
        self._waits_read = False

    @property
    def no_binding_waits(self) -> bool:
        """True when the last full scan read the binding waits, found none, and the pass
        parked nothing since: there is nothing for the checkpoint to prune."""
        return self._waits_read and not self._parked

    @property
    def scanned_at(self) -> int | None:
        """``now`` of the last full scan: a timer due at or before it was visited, a later
        one was not (None before the first scan)."""
        return self._scanned_at

    def changed(self, thread_id: str) -> None:
        """Read ``thread_id`` again next time."""
        self._stale.add(thread_id)

    def known(self, thread_id: str) -> tuple[WorkItem, ...] | None:
        """The open work of ``thread_id`` as the scan read it, while nothing changed it since:
        the pass did not touch it and no producer advanced the generation naming it (or
        naming none). None when it may have changed, or was not read."""
        view = self._views.get(thread_id)
        if view is None or self._full or thread_id in self._stale:
            return None
        gate = self._owner._gate
        if gate.generations != self._generations:
            assert self._generations is not None
            changed = gate.changed_threads(self._generations)
            if changed is None or thread_id in changed:
                return None
        return view.items

    def fault(self, thread_id: str, retry_at: int | None) -> None:
        """The pass recorded (``retry_at``) or cleared (None) the fault of ``thread_id``."""
        if retry_at is None:
            self._faults.pop(thread_id, None)
        else:
            self._faults[thread_id] = retry_at
        self._lifted.discard(thread_id)
        self._stale.add(thread_id)

    def lift(self, thread_id: str) -> None:
        """The recovery of faulted ``thread_id`` succeeded: the pass treats it as not faulted
        while its fault stays recorded, until its head is dispatched (see
        :meth:`Maintenance._observe`)."""
        self._faults.pop(thread_id, None)
        self._lifted.add(thread_id)
        self._stale.add(thread_id)

    def lifted(self, thread_id: str) -> bool:
        """Whether ``thread_id`` is lifted and its fault not recorded or cleared since."""
        return thread_id in self._lifted

    @property
    def any_faults(self) -> bool:
        """Whether the pass knows of a faulted or lifted Thread."""
        return bool(self._faults or self._lifted)

    def idle_faults(self) -> list[str]:
        """Faulted Threads with nothing to dispatch, as of the last :meth:`current`: no open
        work left (all of it settled, aborted by an operator, say), or lifted with a head
        that is not runnable now."""
        idle = {thread_id for thread_id in self._faults if thread_id not in self._views}
        for thread_id in self._lifted:
            view = self._views.get(thread_id)
            if view is None or view.need in (Need.TIMED, Need.STABLE):
                idle.add(thread_id)
        return sorted(idle)

    def parked(self, thread_id: str, submission_id: str) -> None:
        """The pass parked ``submission_id`` on a binding wait."""
        self._parked.add(submission_id)
        self._stale.add(thread_id)

    def settle_active(self) -> None:
        """Every Attempt of the pass has ended: read again the Threads seen running."""
        self._stale.update(thread_id for thread_id, view in self._views.items()
                           if view.need is Need.ACTIVE)

    def current(self, now: int, active: frozenset[str]) -> list[ThreadView]:
        owner = self._owner
        storage = owner._storage
        runtime = owner._runtime
        generations = owner._gate.generations
        if not self._full and generations != self._generations:
            assert self._generations is not None
            # Producers outside the pass advanced the generation: read again the Threads
            # they named, or everything when one of them named none.
            changed = owner._gate.changed_threads(self._generations)
            if changed is None:
                self._full = True
            else:
                self._stale.update(changed)
                self._generations = generations
        if self._full:
            items, self._faults = owner._open_work(now)
            for thread_id in self._lifted:
                self._faults.pop(thread_id, None)
            self._parked = set(owner._bindings.parked_submissions()) if items else set()
            self._waits_read = bool(items)
            self._scanned_at = now
            views = classify(storage, items, now, active=active | runtime.active_threads,
                             faults=self._faults, parked=self._parked,
                             registered=runtime.registry)
            self._views = {view.thread_id: view for view in views}
            self._generations, self._full = generations, False
            self._stale.clear()
            if self._first:
                self._first = False
                owner._note_recipients(views)
        else:
            for thread_id in sorted(self._stale):
                items = runtime.ledger.thread_open(thread_id)
                self._views.pop(thread_id, None)
                for view in classify(storage, items, now,
                                     active=active | runtime.active_threads,
                                     faults=self._faults, parked=self._parked,
                                     registered=runtime.registry):
                    self._views[view.thread_id] = view
            self._stale.clear()
        return [self._views[thread_id] for thread_id in sorted(self._views)]


class Maintenance:
    """The maintenance pass of one object incarnation."""

    def __init__(self, parts: MaintenanceParts) -> None:
        self.parts = parts
        self._storage = parts.storage
        self._clock = parts.clock
        self._config = parts.config
        self._rng = parts.rng
        self._queue = parts.scheduler.due_queue
        self._alarm = parts.scheduler.alarm
        self._gate = parts.scheduler.gate
        self._fp = parts.scheduler.failpoints
        self._runtime = parts.runtime
        self._lanes = parts.lanes
        self._faults = parts.faults
        self._bindings = parts.bindings
        self._publication = parts.publication
        self._pause = parts.pause
        self._log = parts.log if parts.log is not None else _logger.error
        #: Recent pass reports of this incarnation (failed ones are durable too).
        self.reports = PassReports(parts.storage)
        #: The running pass's view of open work (None between passes).
        self._scan: _Scan | None = None
        #: The agent registry key this incarnation knows is stored (None: not yet adopted).
        self._registry_key: str | None = None
        #: The gate's generation count when this incarnation last knew the generation record
        #: processed (``processed >= dirty``); None: not known.
        self._processed_at: int | None = None
        #: ``nonterminal`` of the generation record as this incarnation last read or wrote it
        #: (only passes write it): what a caught-up pass, which reads no record, reports.
        self._nonterminal = 0

    # -- start -------------------------------------------------------------------------------

    def start(self, state: generation.MaintenanceState | None = None) -> None:
        """At start-up, after migrations: adopt the agent registry, ensure the alarm, report
        parked lanes. O(1) rows: the ledger is never read here. ``state`` is the generation
        record the caller read at start-up, if it did (it is read here otherwise)."""
        key = self._runtime.binding_registry_key
        if state is None:
            state = generation.read_state(self._storage)
        self._nonterminal = state.nonterminal
        self._note_processed(state)
        self._bindings.reconcile(key, stored=state.binding_registry_key)
        self._registry_key = key
        self._gate.ensure_alarm()
        self.report_parked()

    def report_parked(self) -> int:
        """Log each parked lane not reported yet, once; return how many."""
        taken = self._storage.transaction(self._queue.take_parked_reports)
        for lane in taken:
            self._log(
                f"threadline: maintenance lane {lane.id!r} is parked after {lane.stalls} "
                f"attempts without progress; retried hourly until it progresses"
            )
        return len(taken)

    # -- the pass ----------------------------------------------------------------------------

    async def run_pass(self) -> PassReport:
        """Run one pass and return its report; see the module docstring."""
        started = self._clock.now_ms()
        before = self._storage.meter.reading()
        observed = _Observed(revision=self._gate.revision)
        tally = _Tally()
        failure: Exception | None = None
        with self._alarm.wakes_deferred():
            try:
                decision = await self._pass(started, observed, tally)
            except Exception as exc:  # classified below: defects are re-raised
                failure = exc
                decision = await self._rearm_failure(observed)
        if tally.parked_lanes or failure is not None:
            try:
                self.report_parked()
            except ThreadlineError as exc:
                self._log(f"threadline: could not report parked lanes ({type(exc).__name__})")
        cost = self._storage.meter.reading() - before
        fields: dict[str, object] = {
            "started_at": started,
            "recovered": tally.recovered,
            "settled": tally.settled,
            "dispatched": tally.dispatched,
            "nonterminal": tally.nonterminal if observed.actionable else observed.nonterminal,
            "alarm": decision,
            "alarm_at": self._storage.known_alarm(),
            "duration_ms": max(0, self._clock.now_ms() - started),
        }
        if failure is not None:
            fields.update(failure_fields(failure), phase=PassPhase.FAILED)
            self._log(
                "threadline: maintenance pass failed"
                f" error_type={type(failure).__name__} generation={observed.generation}"
                f" actionable={observed.actionable} alarm={decision.value}"
                f" alarm_at={fields['alarm_at']}"
            )
        else:
            fields["phase"] = PassPhase.ACTIONABLE if observed.actionable else PassPhase.CAUGHT_UP
        report = PassReport.costed(cost, **fields)
        self._keep(report)
        if failure is not None and not isinstance(failure, ThreadlineError):
            raise failure
        return report

    async def _pass(self, started: int, observed: _Observed, tally: _Tally) -> AlarmDecision:
        config = self._config
        event_deadline = started + config.event_deadline_ms
        await self._fp.reached(BEGIN_BEFORE)
        with self._gate.snapshot() as active:
            observed.active_at_start = active
            due = self._storage.transaction(lambda: self._begin(started, observed))
            revision = observed.revision = self._gate.revision
            enrollments = self._queue.lane_enrollments
        await self._fp.reached(BEGIN_AFTER)

        waves = [
            asyncio.ensure_future(self._wave(lane, event_deadline, tally, selected_at=started))
            for lane in self._lanes.due(due, started)
        ]
        pub = self._publication
        # Subscribers are served by an actionable pass (its native work may have appended
        # records) and by one their lane brought; a caught-up pass reads nothing of them.
        publishing = pub is not None and pub.declared and (
            observed.actionable or any(lane.id == PUBLICATION for lane in due))
        deliveries: list[asyncio.Future[bool]] = []
        required_first: asyncio.Future[bool] | None = None
        if pub is not None and publishing:
            tally.waves.add(PUBLICATION)
            pub.begin_pass()
            # Required subscribers drain before native work; the others go beside it.
            if pub.required:
                required_first = asyncio.ensure_future(pub.round(event_deadline, required=True))
                deliveries.append(required_first)
            deliveries.append(asyncio.ensure_future(pub.round(event_deadline, required=False)))
        scan = self._scan = _Scan(self)
        failure: Exception | None = None
        try:
            if observed.actionable:
                gated: dict[str, str] | None = None
                if pub is not None and publishing and required_first is not None:
                    await required_first
                    gated = pub.gated()
                with self._gate.native_source(crash_fallback=observed.fallback,
                                              retry_recorded=observed.retry_recorded):
                    await self._native(started, observed, tally, scan, gated)
                if pub is not None and publishing:
                    await asyncio.gather(*deliveries)
                    # What this pass's own Attempts appended, delivered in the same event.
                    if pub.behind():
                        await pub.round(event_deadline)
                    if gated is not None:
                        gated = pub.gated()
                await self._checkpoint(observed, tally, scan, gated)
            if waves:
                await asyncio.gather(*waves)
            if deliveries:
                await asyncio.gather(*deliveries)
            if observed.actionable and (
                    self._queue.lane_enrollments != enrollments
                    or any(lane.id not in tally.waves for lane in self._lanes.concurrent(due))):
                # Lanes enrolled meanwhile (recovery events of this pass, say), or due at the
                # begin but held by a mutation then. One that merely fell due by the clock
                # meanwhile is left to the final decision's alarm.
                now = self._clock.now_ms()
                later = [lane for lane in self._lanes.due(self._queue.due(now), now)
                         if lane.id not in tally.waves]
                await asyncio.gather(*(self._wave(lane, event_deadline, tally)
                                       for lane in later))
        except Exception as exc:  # re-raised once the after-native lanes had their waves
            failure = exc
        finally:
            self._scan = None
            for wave in waves:
                wave.cancel()
            for delivery in deliveries:
                delivery.cancel()
        # Every native Attempt has joined, even if native work failed: after-native lanes.
        unchanged = failure is None and self._queue.lane_enrollments == enrollments
        await self._after_native(due if unchanged else None, event_deadline, tally)
        if failure is not None:
            raise failure

        if pub is not None and pub.declared and (publishing or tally.waves):
            # A lane wave may have appended records too (a message refused for good, say):
            # whatever is left to deliver has the publication lane due.
            pub.settle_lane(self._clock.now_ms())
            pub.report_parked()
        await self._fp.reached(FINISH_BEFORE)
        now = self._clock.now_ms()
        with self._gate.snapshot():

            def decide() -> AlarmDecision:
                if observed.actionable or tally.waves or self._gate.revision != revision:
                    return self._alarm.decide(now)
                # Caught up, no wave ran and no producer committed: the lanes are as the
                # begin read them, so its earliest due decides without a second read.
                return self._alarm.decide_known(now, observed.earliest)

            found = observed.retry_found
            if found is not None and (observed.actionable or observed.retry_stale):
                # The pass succeeded: a retry left behind by failures ends with it (one
                # still deferring owed native work stays), so the next failure backs off
                # from the base again rather than from where a former streak stopped. Only
                # the one found at the begin: the checkpoint's own, for work that made no
                # progress, stays even when lane waves outlasted its not_before.
                def finish() -> AlarmDecision:
                    generation.end_retry(self._storage, now, found)
                    return decide()

                decision = self._storage.transaction(finish)
            else:
                decision = decide()
        await self._fp.reached(FINISH_AFTER)
        return decision

    def _begin(self, now: int, observed: _Observed) -> list[Lane]:
        key = self._runtime.binding_registry_key
        # One indexed row answers every question while nothing is due and this incarnation
        # knows the generation is processed (no advance since it last read or certified it:
        # only the gate advances it, and counts each advance): the earliest lane is the next
        # due (for the final decision) and, being later than now, says no lane is, the native
        # lane included. The generation record is read otherwise.
        observed.earliest = self._queue.next()
        nothing_due = observed.earliest is None or observed.earliest > now
        if (nothing_due and key == self._registry_key
                and self._processed_at == self._gate.generations):
            observed.nonterminal = self._nonterminal
            return []
        current = generation.read_state(self._storage)
        if current.binding_registry_key != key:
            self._bindings.reconcile(key, stored=current.binding_registry_key)
            current = generation.read_state(self._storage)
            # The reconcile's own commit is not a producer racing the pass.
            observed.revision = self._gate.revision
            observed.earliest = self._queue.next()
            nothing_due = observed.earliest is None or observed.earliest > now
        self._registry_key = key
        self._note_processed(current)
        due = [] if nothing_due else self._queue.due(now)
        native = next((lane for lane in due if lane.id == NATIVE), None)
        observed.generation = current.dirty
        observed.retry_found = current.retry
        observed.retry_stale = observed.retry_recorded and not current.retry_defers(now)
        observed.nonterminal = self._nonterminal = current.nonterminal
        observed.last_served = current.last_served_thread
        observed.last_recovered = current.last_recovered_thread
        observed.actionable = not current.caught_up(native, now)
        if observed.actionable:
            # Crash fallback: should this incarnation be lost mid-pass, the native lane is
            # due again after a backoff, not at once and forever. The checkpoint replaces it.
            retry = current.pending_retry
            stalls = 0 if retry is None else retry.stalls
            observed.fallback = now + backoff_ms(stalls, self._config, self._rng)
            self._queue.checkpoint_native(observed.fallback)
        return due

    async def _wave(
        self, lane: Lane, until: int, tally: _Tally, *, selected_at: int | None = None
    ) -> WaveResult:
        # A wave woken late in the pass whose allowance no longer fits is not started (the
        # lane stays due for the next event, uncharged): see LaneRunner.run_wave.
        tally.waves.add(lane.id)
        await self._pause()
        result = await self._lanes.run_wave(lane, until=until, selected_at=selected_at)
        if result.newly_parked:
            tally.parked_lanes = True
        return result

    async def _after_native(
        self, snapshot: list[Lane] | None, until: int, tally: _Tally
    ) -> None:
        """One wave for each due after-native lane (see :meth:`LaneRunner.run_after_native`).

        ``snapshot`` is the begin's read when no lane was enrolled since: no second read then
        (a lane that merely fell due by the clock meanwhile is left to the final decision's
        alarm, as for the second round).
        """
        for result in await self._lanes.run_after_native(
                until, snapshot=snapshot, exclude=frozenset(tally.waves)):
            tally.waves.add(result.lane_id)
            if result.newly_parked:
                tally.parked_lanes = True

    # -- native work -------------------------------------------------------------------------

    def _open_work(self, now: int) -> tuple[list[WorkItem], dict[str, int]]:
        """The open submissions of every Thread that may owe work now, and the fault deadlines.

        Visited: Threads with live work (queued, ready, running or terminalizing: the
        ``dormant = 0`` range of the open-work index ``tl_submissions_open``), Threads with
        a timer due at ``now`` (through the due index on open waits), and Threads under a
        recovery fault. A Thread suspended on a timer that is not due, or waiting for the
        outside world, is never read, nor is the input queued behind its suspended head once
        a checkpoint held it (:meth:`_hold_followers`): the pass's reads follow due and live
        work, not the number of pending timers or waiting Threads. The earliest pending timer
        is one indexed read at the checkpoint (:func:`waits.next_timer`).
        """
        ledger = self._runtime.ledger
        deadlines = self._faults.deadlines()
        threads = set(ledger.live_threads())
        threads.update(waits.due_timer_threads(self._storage, now))
        threads.update(deadlines)
        items = [item for thread_id in sorted(threads) for item in ledger.thread_open(thread_id)]
        return items, deadlines

    async def _native(
        self, started: int, observed: _Observed, tally: _Tally, scan: _Scan,
        gated: dict[str, str] | None = None,
    ) -> None:
        config = self._config
        yield_after = started + config.yield_after_ms
        event_deadline = started + config.event_deadline_ms
        tasks: dict[str, asyncio.Task[bool]] = {}
        deferred: set[str] = set()
        recovered: set[str] = set()
        deadline = asyncio.ensure_future(self._clock.sleep_until(event_deadline))
        try:
            while True:
                now = self._clock.now_ms()
                if now >= event_deadline:
                    tally.cut_short = True
                    break
                views = scan.current(now, frozenset(tasks))
                tally.nonterminal = _nonterminal(views)
                await self._clear_idle_faults(scan, tally)
                # Each Thread is recovered at most once per pass outside its own dispatch.
                backlog = [view for view in views if view.need is Need.RECOVER
                           and view.thread_id not in recovered and view.thread_id not in tasks]
                if backlog:
                    recovered.update(view.thread_id for view in backlog)
                    await self._recover_backlog(backlog, observed, tally, event_deadline)
                    for view in backlog:
                        scan.changed(view.thread_id)
                    continue
                if now < yield_after:
                    free = config.native_concurrency - len(tasks)
                    # One head per Thread: a Thread with an Attempt running is not offered
                    # again (its cached view predates the Attempt).
                    # A Thread with records a required subscriber has not consumed waits.
                    runnable = [view for view in views if view.need is Need.RUNNABLE
                                and view.thread_id not in deferred
                                and view.thread_id not in tasks
                                and (gated is None or view.thread_id not in gated)]
                    if free > 0 and runnable:
                        for view in await self._select(runnable, free, observed, tally):
                            tally.dispatched += 1
                            tasks[view.thread_id] = asyncio.ensure_future(
                                self._attempt(view, yield_after, tally))
                elif any(view.need is Need.RUNNABLE for view in views):
                    tally.cut_short = True
                if not tasks:
                    break
                await self._await_progress(tasks, deadline)
                for thread_id, task in list(tasks.items()):
                    if task.done():
                        del tasks[thread_id]
                        scan.changed(thread_id)
                        if not task.result():
                            deferred.add(thread_id)
                        if gated is not None and self._publication is not None:
                            # What the Attempt appended waits for the required subscribers
                            # before the Thread's next head may run.
                            holder = self._publication.gated_thread(thread_id)
                            if holder is not None:
                                gated[thread_id] = holder
                # Requests waiting for the object are served before the next Attempt starts:
                # what they admit is in the next scan.
                await self._pause()
        finally:
            deadline.cancel()
            for thread_id, task in tasks.items():
                task.cancel()
                scan.changed(thread_id)
            for task in tasks.values():
                # Cancelled at the event deadline or because the pass failed: the claim stays
                # this incarnation's, no longer active, so the next recovery takes it at once.
                with suppress(asyncio.CancelledError, Exception):
                    await task
        if scan.any_faults:
            # Every Attempt has joined. The loop clears the faults of Threads left with nothing
            # to dispatch only at its next turn, which a deadline reached meanwhile skips (the
            # last recovery lifted a fault, its head suspended): unless cleared here, such a
            # fault would outlive the pass with nothing owed, its retry in the past and no alarm.
            scan.settle_active()
            scan.current(self._clock.now_ms(), frozenset())
            await self._clear_idle_faults(scan, tally)

    async def _await_progress(
        self, tasks: dict[str, asyncio.Task[bool]], deadline: asyncio.Future[None]
    ) -> None:
        """Wait until an Attempt ends, the event deadline passes, or a producer outside the
        pass advanced the generation (new input must not wait for a long Attempt to end)."""
        seen = self._gate.generations
        while True:
            change = self._gate.changed(self._gate.revision)
            waiting: set[asyncio.Future[Any]] = {*tasks.values(), deadline, change}
            try:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                change.cancel()
            if done - {change} or self._gate.generations != seen:
                return

    def _note_recipients(self, views: list[ThreadView]) -> None:
        """Input admitted to a Thread under a fault hears of the fault too (once).

        Should storage refuse it for one Thread, that Thread's new input hears of it at the
        first scan of a later pass (the fault's retry brings one), and the others go on.
        """
        for view in views:
            if view.need is Need.FAULTED:
                try:
                    self._faults.note_recipients(view.thread_id, view.submission_ids)
                except ThreadlineError as exc:
                    self._log(f"threadline: could not note the recipients of the recovery "
                              f"fault of thread {view.thread_id!r} ({type(exc).__name__})")

    async def _recover_backlog(
        self, backlog: list[ThreadView], observed: _Observed, tally: _Tally, deadline: int
    ) -> None:
        """Recover the Threads that need it and are not dispatched, one at a time, starting
        after ``last_recovered_thread`` so a deadline or eviction cannot always restart at the
        front."""
        last = observed.last_recovered
        after = [view for view in backlog if last is None or view.thread_id > last]
        before = [view for view in backlog if last is not None and view.thread_id <= last]
        # With one Thread to recover there is no front to restart at: the cursor is kept in
        # memory only (a row written per recovery saved).
        durable = len(backlog) > 1
        for view in after + before:
            if self._clock.now_ms() >= deadline:
                tally.cut_short = True
                return
            await self._fp.reached(SELECT_BEFORE)
            stored = not durable or await self._set_cursor(
                "last_recovered_thread", view, tally)
            await self._fp.reached(SELECT_AFTER)
            if stored:
                observed.last_recovered = view.thread_id
                await self._recover(view, tally)

    async def _set_cursor(self, name: str, view: ThreadView, tally: _Tally) -> bool:
        """Store a round-robin cursor at ``view``'s Thread; False when storage refused it.

        The refusal is that Thread's problem, not the pass's: it becomes the Thread's fault
        (logged, retried at the fault's backoff) and the Thread is left alone this time, as
        when storage refuses its dispatch (:meth:`_blocked`). Failing the pass would cancel
        the Attempts of every other Thread running.
        """
        thread_id = view.thread_id
        try:
            self._storage.transaction(
                lambda: generation.set_cursor(self._storage, name, thread_id))
        except ThreadlineError as exc:
            self._log(f"threadline: could not store the maintenance cursor {name}"
                      f" ({type(exc).__name__}); thread {thread_id!r} is retried after a backoff")
            await self._blocked(view, exc, tally)
            return False
        return True

    async def _recover(self, view: ThreadView, tally: _Tally) -> bool:
        """Run recovery for one Thread and commit its fault status; True when not blocked.

        Recovery decides from the open work the scan read when nothing changed it since."""
        known = None if self._scan is None else self._scan.known(view.thread_id)
        if known is None:
            sweep = self._runtime.run_recovery(view.thread_id)
        else:
            with self._runtime.ledger.prefetched(view.thread_id, known):
                sweep = self._runtime.run_recovery(view.thread_id)
        tally.recovered += len(sweep.reports) + len(sweep.blocked)
        tally.repaired = tally.repaired or any(
            report.disposition is not Disposition.UNKNOWN for report in sweep.reports)
        return await self._observe(view, sweep, tally)

    async def _observe(self, view: ThreadView, sweep: RecoverySweepResult, tally: _Tally) -> bool:
        """Commit what one recovery means for the Thread's fault; True when not blocked.

        A faulted Thread whose recovery succeeded is *lifted*, not cleared: the fault is what
        backs off a dispatch that keeps failing (a claim refused again and again), so it stays
        recorded until the head is dispatched, and a failure meanwhile counts as its next
        attempt (a longer retry, at most a ``changed`` event) instead of a new fault at
        attempt 1 after a ``cleared``. A Thread left with nothing to dispatch has its fault
        cleared by :meth:`_clear_idle_faults`.
        """
        faulted = view.faulted and not sweep.blocked
        if not sweep.blocked and not faulted:
            return True
        if not sweep.blocked and self._scan is not None:
            self._scan.lift(view.thread_id)
            return True
        return await self._fault_status(
            view.thread_id, tally,
            lambda: self._faults.observe(view.thread_id, sweep,
                                         recipients=view.submission_ids, faulted=faulted))

    async def _clear_idle_faults(self, scan: _Scan, tally: _Tally) -> None:
        """Clear the faults of Threads with nothing left to dispatch, so their recipients
        hear ``cleared`` and ``/maintenance`` stops listing them."""
        for thread_id in scan.idle_faults():
            if thread_id not in tally.unrecorded:
                await self._fault_status(thread_id, tally, partial(self._clear_fault, thread_id))

    def _clear_fault(self, thread_id: str) -> None:
        self._faults.clear(thread_id)

    async def _fault_status(
        self, thread_id: str, tally: _Tally, write: Callable[[], Fault | None]
    ) -> bool:
        """Commit one Thread's fault transition (``write`` returns the fault left, if any);
        True when it committed and left no fault.

        Storage refusing it fails this Thread's item only: failing the pass would cancel
        every other Thread's running Attempt. Nothing of the transition was written, so
        what is owed stays as it was: the Thread's head still runnable, or its fault due,
        or one with no open work left. The checkpoint counts the Thread as owed now, so its
        generation is retried: at once after a pass that moved something, else with the
        native retry's backoff.
        """
        await self._fp.reached(RECOVERY_STATUS_BEFORE)
        try:
            fault = write()
        except ThreadlineError as exc:
            tally.unrecorded.add(thread_id)
            self._log(f"threadline: could not record the recovery status of thread "
                      f"{thread_id!r} ({type(exc).__name__}); retried with the pass's backoff")
            return False
        tally.unrecorded.discard(thread_id)
        if self._scan is not None:
            self._scan.fault(thread_id, None if fault is None else fault.retry_at)
        await self._fp.reached(RECOVERY_STATUS_AFTER)
        return fault is None

    async def _select(
        self, runnable: list[ThreadView], free: int, observed: _Observed, tally: _Tally
    ) -> list[ThreadView]:
        """Choose up to ``free`` Threads round-robin after ``last_served_thread``.

        The cursor is stored before the Attempts start only when some runnable Thread is left
        out: then it is what keeps an eviction mid-Attempt from favouring the same Threads
        again. When every runnable Thread is chosen nobody waits behind them, so it is kept
        in memory only (a row written per dispatch saved). Should storage refuse the cursor,
        the Thread it names is not dispatched (see :meth:`_set_cursor`); the others are.
        """
        ordered = sorted(runnable, key=lambda view: view.thread_id)
        last = observed.last_served
        pivot = next((i for i, view in enumerate(ordered)
                      if last is None or view.thread_id > last), 0)
        chosen = (ordered[pivot:] + ordered[:pivot])[:free]
        await self._fp.reached(SELECT_BEFORE)
        newest = chosen[-1]
        if len(ordered) > len(chosen) and not await self._set_cursor(
                "last_served_thread", newest, tally):
            # The Thread the cursor names is faulted and not dispatched; the rest still run.
            chosen = chosen[:-1]
        observed.last_served = newest.thread_id
        await self._fp.reached(SELECT_AFTER)
        return chosen

    async def _attempt(self, view: ThreadView, yield_after: int, tally: _Tally) -> bool:
        """Recover the Thread, then run one Attempt of its head; True when it settled."""
        recovered = tally.recovered
        if not await self._recover(view, tally):
            return False
        # What the scan read, when recovery found nothing to do and nothing changed the
        # Thread since: the claim decides from it instead of reading it a third time.
        known = (self._scan.known(view.thread_id)
                 if self._scan is not None and tally.recovered == recovered else None)
        hint = (nullcontext() if known is None
                else self._runtime.ledger.prefetched(view.thread_id, known))
        try:
            with hint:
                settlement = await self._runtime.process_thread_head(
                    view.thread_id, yield_after=yield_after)
        except BindingUnavailable:
            try:
                head = self._runtime.head(view.thread_id)
                if head is not None:
                    await self._fp.reached(BINDING_BEFORE)
                    self._bindings.park(view.thread_id, head.submission_id, head.agent)
                    if self._scan is not None:
                        self._scan.parked(view.thread_id, head.submission_id)
                    await self._fp.reached(BINDING_AFTER)
            except (ThreadlineError, ValueError, KeyError) as exc:
                await self._blocked(view, exc, tally)
            return False
        except (ThreadlineError, ValueError, KeyError) as exc:
            await self._blocked(view, exc, tally)
            return False
        if self._scan is not None and self._scan.lifted(view.thread_id):
            # The dispatch that a lifted fault was holding back went through.
            await self._fault_status(view.thread_id, tally,
                                     partial(self._clear_fault, view.thread_id))
        if settlement is None:
            return False
        tally.settled += 1
        return True

    async def _blocked(self, view: ThreadView, exc: Exception, tally: _Tally) -> None:
        """Storage failed (or a record could not be read) while dispatching one Thread, with
        no claim held: nothing of it moved. It becomes that Thread's fault, like a failed
        recovery; failing the pass would cancel the Attempts of every other Thread running."""
        blocked = RecoveryBlocked(view.thread_id, str(exc), type(exc).__name__)
        await self._observe(view, RecoverySweepResult(blocked=(blocked,)), tally)

    # -- checkpoint and failure ----------------------------------------------------------------

    async def _checkpoint(
        self, observed: _Observed, tally: _Tally, scan: _Scan,
        gated: Mapping[str, str] | None = None,
    ) -> None:
        await self._fp.reached(CHECKPOINT_BEFORE)
        with self._gate.snapshot() as active:
            self._storage.transaction(
                lambda: self._certify(observed, tally, active, scan, gated or {}))
        await self._fp.reached(CHECKPOINT_AFTER)

    def _certify(
        self, observed: _Observed, tally: _Tally, active: int, scan: _Scan,
        gated: Mapping[str, str],
    ) -> None:
        now = self._clock.now_ms()
        current = generation.read_state(self._storage)
        # Every Attempt has joined: the scan re-reads the Threads the pass touched and those
        # producers outside the pass named (all of them, had one named none).
        scan.settle_active()
        views = self._hold_followers(scan.current(now, frozenset()))
        nonterminal = _nonterminal(views)
        tally.nonterminal = nonterminal
        # A Thread whose fault transition storage refused is owed too, even with no view.
        owed_now = bool(tally.unrecorded) or any(
            view.need in (Need.RUNNABLE, Need.RECOVER) and view.thread_id not in gated
            for view in views)
        timed = [view.due_at for view in views
                 if view.need in (Need.TIMED, Need.FAULTED) and view.due_at is not None]
        # Runnable work held by the required gate is due when its subscriber can deliver
        # again: now when it merely ran out of its wave, at its retry when it backs off,
        # never while it is parked (a deploy that bumps its version wakes native work).
        pub = self._publication
        if pub is not None:
            for view in views:
                name = gated.get(view.thread_id)
                if name is not None and view.need is Need.RUNNABLE:
                    due = pub.ready_at(name, now)
                    if due is not None:
                        timed.append(due)
        # Suspensions whose timers were not due at the last full scan were not visited: their
        # earliest timer bounds when one can wake (one that fell due since is due now).
        since = scan.scanned_at
        sleeper = waits.next_timer(self._storage, now if since is None else since)
        if sleeper is not None:
            timed.append(sleeper)
        overlap = (observed.active_at_start > 0 or active > 0
                   or current.dirty != observed.generation)
        gen = observed.generation
        assert gen is not None
        native: int | None
        acknowledged = False
        if overlap:
            native = now + self._alarm.min_delay_ms
        elif owed_now:
            if tally.cut_short or tally.settled > 0 or tally.repaired:
                native = now + self._alarm.min_delay_ms
            else:
                # Work owed now that made no progress: back the generation off durably.
                retry = current.pending_retry
                stalls = 0 if retry is None else retry.stalls
                not_before = now + backoff_ms(stalls, self._config, self._rng)
                generation.set_retry(self._storage, NativeRetry(gen, not_before, True, stalls + 1))
                native = not_before
        else:
            acknowledged = True
            native = None
        if timed:
            native = min(timed) if native is None else min(native, min(timed))
        if acknowledged:
            generation.acknowledge_counting(self._storage, gen, nonterminal)
        else:
            generation.set_nonterminal(self._storage, nonterminal)
        # Acknowledged with no producer overlapping: processed reached dirty as the gate
        # counts it now (synchronous, under the snapshot).
        self._storage.after_commit(partial(
            self._counted, nonterminal, self._gate.generations if acknowledged else None))
        if not scan.no_binding_waits:
            self._bindings.prune()
        self._queue.checkpoint_native(native)
        if pub is not None and pub.declared:
            # The checkpoint replaces the crash fallback, which stood for the records this
            # generation appended too: those still undelivered keep their lane due, or an
            # object lost before the pass's end would owe them with nothing left due.
            undelivered = pub.next_due(now)
            if undelivered is not None:
                self._queue.set_due(PUBLICATION, undelivered)

    def _counted(self, nonterminal: int, processed_at: int | None) -> None:
        self._nonterminal = nonterminal
        if processed_at is not None:
            self._processed_at = processed_at

    def _note_processed(self, state: generation.MaintenanceState) -> None:
        """Remember whether ``state``, read just now, had its generation processed."""
        self._processed_at = (self._gate.generations if state.processed >= state.dirty
                              else None)

    def _hold_followers(self, views: list[ThreadView]) -> list[ThreadView]:
        """Take the input queued behind each suspended head out of the live range.

        Nothing behind a suspended head can run before it leaves the suspension, and every
        way out of it (a decision, an abort, a due timer applied) makes that input live again
        in the same transaction (:func:`transitions.hold_followers`). So later passes do not
        read such a Thread until its wait can change. A Thread under a fault is left as it
        is: its fault brings it back anyway. Returns the views as they now stand.
        """
        stood: list[ThreadView] = []
        for view in views:
            behind = _behind_suspension(view)
            if (behind and view.head is not None
                    and transitions.hold_followers(self._storage, view.head)):
                view = replace(view, items=tuple(
                    replace(item, dormant=True) if item.submission_id in behind else item
                    for item in view.items))
            stood.append(view)
        return stood

    async def _rearm_failure(self, observed: _Observed) -> AlarmDecision:
        """Back off the failed pass and decide the alarm; see the module docstring.

        Reads the generation record first: should storage refuse even that (unavailable),
        the error propagates and the platform's retry is the last resort.
        """
        await self._fp.reached(RETRY_BEFORE)
        now = self._clock.now_ms()
        with self._gate.snapshot() as active:

            def rearm() -> AlarmDecision:
                current = generation.read_state(self._storage)
                gen = observed.generation
                if gen is not None and observed.actionable:
                    not_before, stalls = self._backoff(current, gen, now)
                    generation.set_retry(
                        self._storage, NativeRetry(gen, not_before, True, stalls + 1))
                    # A producer that raced the failed observation is never postponed.
                    raced = active > 0 or current.dirty != gen
                    self._queue.checkpoint_native(
                        now + self._alarm.min_delay_ms if raced else not_before)
                else:
                    self._back_off_pass(current, observed, now, active)
                return self._alarm.decide(now)

            decision = self._storage.transaction(rearm)
        await self._fp.reached(RETRY_AFTER)
        return decision

    def _back_off_pass(
        self, current: generation.MaintenanceState, observed: _Observed, now: int, active: int
    ) -> None:
        """Back off a pass that failed outside native work, before its begin read the record
        (storage refusing that read, a failing registry reconcile), say: it served nothing, so
        the whole pass waits. The retry record of the current generation counts the stalls
        (durable: a new incarnation goes on from them) and every lane due before its
        ``not_before`` is deferred to it, so that nothing rebuilt from the queue arms the
        alarm sooner. A producer that committed during the pass is never postponed: then
        nothing is backed off; nor is anything when no lane is due at all (nothing is owed).
        """
        raced = (active > 0 or self._gate.revision != observed.revision
                 or (observed.generation is not None and current.dirty != observed.generation))
        if raced or self._queue.next() is None:
            return
        gen = current.dirty
        not_before, stalls = self._backoff(current, gen, now)
        generation.set_retry(self._storage, NativeRetry(gen, not_before, False, stalls + 1))
        self._queue.defer(not_before)

    def _backoff(
        self, current: generation.MaintenanceState, gen: int, now: int
    ) -> tuple[int, int]:
        """``(not_before, stalls so far)`` for one more failure of generation ``gen``: the
        jittered ``base * 2^stalls`` from now, never earlier than the retry already recorded."""
        retry = current.retry
        previous = retry if retry is not None and retry.generation == gen else None
        stalls = 0 if previous is None else previous.stalls
        not_before = max(0 if previous is None else previous.not_before,
                         now + backoff_ms(stalls, self._config, self._rng))
        return not_before, stalls

    def _keep(self, report: PassReport) -> None:
        try:
            self.reports.keep(report)
        except ThreadlineError as exc:
            self._log(f"threadline: could not store a pass report ({type(exc).__name__})")


#: States of the input that can be held behind a suspended head.
_HOLDABLE = frozenset({SubmissionState.QUEUED, SubmissionState.READY})


def _behind_suspension(view: ThreadView) -> frozenset[str]:
    """The live input queued behind the suspended head of a Thread that waits: none when its
    head is not suspended, or it is faulted, or its timers are due (recovery will wake it)."""
    head = view.head
    if (head is None or head.state is not SubmissionState.SUSPENDED or view.faulted
            or view.need not in (Need.STABLE, Need.TIMED)):
        return frozenset()
    return frozenset(item.submission_id for item in view.items
                     if item.seq > head.seq and not item.dormant and item.state in _HOLDABLE)


def _nonterminal(views: list[ThreadView]) -> int:
    """The open submissions of the Threads a full scan visits (live, due or faulted work).

    The pass keeps the views of the Threads it touched; one of them that went to sleep on a
    timer that is not due (or waits for the outside world with nothing live, its queued input
    held) is one a full scan would not read, so it is not counted: the figure, and the stored
    row, do not change with which Threads the pass happened to run.
    """
    return sum(
        len(view.items) for view in views
        if view.faulted or view.need not in (Need.TIMED, Need.STABLE)
        or any(not item.dormant for item in view.items)
    )


__all__ = ["Maintenance", "MaintenanceParts"]
