"""The maintenance pass's orchestrator: :class:`Maintenance` runs one alarm event's pass.

It starts an incarnation's maintenance and runs each pass through its phases in order: the
begin (:mod:`.pass_begin`), native dispatch with recovery (:mod:`.native_dispatch`,
:mod:`.pass_recovery`) and its checkpoint (:mod:`.pass_checkpoint`), the lane waves and
subscriber deliveries around them (:mod:`.pass_lanes`), and the finish (:mod:`.pass_finish`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from threadline.errors import ThreadlineError
from threadline.maintenance.native_dispatch import Beside, dispatch_native
from threadline.maintenance.pass_begin import begin
from threadline.maintenance.pass_checkpoint import checkpoint
from threadline.maintenance.pass_context import MaintenanceParts, PassContext, _Scan
from threadline.maintenance.pass_finish import finish_pass, rearm_failure
from threadline.maintenance.pass_lanes import second_round, serve_after_native, serve_lane
from threadline.maintenance.pass_state import BEGIN_AFTER, BEGIN_BEFORE, _Observed, _Tally
from threadline.maintenance.report import PassPhase, PassReport, PassReports, failure_fields
from threadline.scheduling import PUBLICATION, AlarmDecision
from threadline.scheduling import state as generation


class Maintenance(PassContext):
    """The maintenance pass of one object incarnation (DESIGN §4): one alarm event runs every
    Thread toward settlement.

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
       claims are this incarnation's, but no longer active, so the next recovery takes them
       at once).
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
    postponed. Only a defect propagates, after the same re-arming. Should the re-arming itself
    fail (storage unavailable, even for the record's read), the pass re-arms the alarm slot
    alone with a backoff counted in memory, so owed work is never left without an alarm; only
    a refused alarm write propagates, leaving the platform's own retry as the last resort.
    """

    def __init__(self, parts: MaintenanceParts) -> None:
        super().__init__(parts)
        #: Recent pass reports of this incarnation (failed ones are durable too).
        self.reports = PassReports(parts.storage)

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
        """Run one pass and return its report; see :class:`Maintenance`."""
        started = self._clock.now_ms()
        before = self._storage.meter.reading()
        failures_before = self._runtime.failures.count
        observed = _Observed(revision=self._gate.revision)
        tally = _Tally()
        failure: Exception | None = None
        with self._alarm.wakes_deferred():
            try:
                decision = await self._pass(started, observed, tally)
            except Exception as exc:  # classified below: defects are re-raised
                failure = exc
                decision = await rearm_failure(self, observed)
        if tally.parked_lanes or failure is not None:
            try:
                self.report_parked()
            except ThreadlineError as exc:
                self._log(f"threadline: could not report parked lanes ({type(exc).__name__})")
        cost = self._storage.meter.reading() - before
        attempts_failed, failed_attempts = self._runtime.failures.since(failures_before)
        fields: dict[str, object] = {
            "started_at": started,
            "recovered": tally.recovered,
            "settled": tally.settled,
            "dispatched": tally.dispatched,
            "nonterminal": tally.nonterminal if observed.actionable else observed.nonterminal,
            "alarm": decision,
            "alarm_at": self._storage.known_alarm(),
            "duration_ms": max(0, self._clock.now_ms() - started),
            "attempts_failed": attempts_failed,
            "failed_attempts": failed_attempts,
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
            due = self._storage.transaction(lambda: begin(self, started, observed))
            revision = observed.revision = self._gate.revision
            enrollments = self._queue.lane_enrollments
        await self._fp.reached(BEGIN_AFTER)

        waves = [
            asyncio.ensure_future(
                serve_lane(self, lane, event_deadline, tally, selected_at=started))
            for lane in self._lanes.due(due, started)
        ]
        pub = self._publication
        # Subscribers are served by an actionable pass (its native work may have appended
        # records) and by one their lane brought; a caught-up pass reads nothing of them.
        publishing = pub is not None and pub.declared and (
            observed.actionable or any(lane.id == PUBLICATION for lane in due))
        beside: Beside | None = None
        if pub is not None and publishing:
            tally.waves.add(PUBLICATION)
            pub.begin_pass()
            # Every subscriber's wave goes beside native work, which never waits for one: a
            # Thread a required subscriber gates is left out until its records are consumed.
            beside = Beside(pub, asyncio.ensure_future(pub.round(event_deadline)),
                            event_deadline)
        scan = self._scan = _Scan(self)
        failure: Exception | None = None
        try:
            if not observed.actionable and beside is not None:
                await self._while_delivering(beside, observed)
            if observed.actionable:
                with self._gate.native_source(crash_fallback=observed.fallback,
                                              retry_recorded=observed.retry_recorded):
                    await dispatch_native(self, started, observed, tally, scan, beside)
                if beside is not None:
                    await asyncio.gather(*beside.rounds)
                await checkpoint(self, observed, tally, scan)
            if waves:
                await asyncio.gather(*waves)
            if beside is not None:
                await asyncio.gather(*beside.rounds)
            await second_round(self, observed, due, enrollments, event_deadline, tally)
        except Exception as exc:  # re-raised once the after-native lanes had their waves
            failure = exc
        finally:
            self._scan = None
            for wave in waves:
                wave.cancel()
            for delivery in [] if beside is None else beside.rounds:
                delivery.cancel()
        # Every native Attempt has joined, even if native work failed: after-native lanes.
        unchanged = failure is None and self._queue.lane_enrollments == enrollments
        await serve_after_native(self, due if unchanged else None, event_deadline, tally)
        if failure is not None:
            raise failure
        return await finish_pass(self, observed, tally, revision, publishing)

    async def _while_delivering(self, beside: Beside, observed: _Observed) -> None:
        """A caught-up pass whose subscriber waves run long (a backfill, a slow destination)
        becomes actionable when a producer advances the generation meanwhile: input admitted
        during the waves runs beside them instead of waiting for the pass to end."""
        seen = self._gate.generations
        while beside.pending():
            change = self._gate.changed(self._gate.revision)
            waiting: set[asyncio.Future[Any]] = {*beside.pending(), change}
            try:
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                change.cancel()
            if self._gate.generations == seen:
                continue
            seen = self._gate.generations
            with self._gate.snapshot() as active:
                observed.active_at_start = active
                self._storage.transaction(
                    lambda: begin(self, self._clock.now_ms(), observed))
            if observed.actionable:
                return

    def _keep(self, report: PassReport) -> None:
        try:
            self.reports.keep(report)
        except ThreadlineError as exc:
            self._log(f"threadline: could not store a pass report ({type(exc).__name__})")


__all__ = ["Maintenance", "MaintenanceParts"]
