"""The end of a maintenance pass: the final alarm decision, or the failure's backoff.

:func:`finish_pass` decides the alarm of a pass that succeeded from the due queue under the
gate's snapshot, ending the retry record found at the begin. :func:`rearm_failure` backs off a
pass that failed (its native generation only, or the whole pass when it failed outside native
work) and decides the alarm too, so the durable backoff replaces the platform's retries.
"""

from __future__ import annotations

from threadline.errors import ThreadlineError
from threadline.maintenance.pass_context import PassContext
from threadline.maintenance.pass_state import (
    FINISH_AFTER,
    FINISH_BEFORE,
    RETRY_AFTER,
    RETRY_BEFORE,
    _Observed,
    _Tally,
)
from threadline.scheduling import AlarmDecision, NativeRetry, backoff_ms
from threadline.scheduling import state as generation


async def finish_pass(
    ctx: PassContext, observed: _Observed, tally: _Tally, revision: int, publishing: bool
) -> AlarmDecision:
    """Decide the alarm of a pass that succeeded, ending the retry it found at the begin.

    ``revision`` is the gate's revision at the begin, ``publishing`` whether the pass served
    the declared subscribers.
    """
    pub = ctx._publication
    if pub is not None and pub.declared and (publishing or tally.waves):
        # A lane wave may have appended records too (a message refused for good, say):
        # whatever is left to deliver has the publication lane due.
        pub.settle_lane(ctx._clock.now_ms())
        pub.report_parked()
    await ctx._fp.reached(FINISH_BEFORE)
    now = ctx._clock.now_ms()
    with ctx._gate.snapshot():

        def decide() -> AlarmDecision:
            if observed.actionable or tally.waves or ctx._gate.revision != revision:
                return ctx._alarm.decide(now)
            # Caught up, no wave ran and no producer committed: the lanes are as the
            # begin read them, so its earliest due decides without a second read.
            return ctx._alarm.decide_known(now, observed.earliest)

        found = observed.retry_found
        if found is not None and (observed.actionable or observed.retry_stale):
            # The pass succeeded: a retry left behind by failures ends with it (one
            # still deferring owed native work stays), so the next failure backs off
            # from the base again rather than from where a former streak stopped. Only
            # the one found at the begin: the checkpoint's own, for work that made no
            # progress, stays even when lane waves outlasted its not_before.
            def finish() -> AlarmDecision:
                generation.end_retry(ctx._storage, now, found)
                return decide()

            decision = ctx._storage.transaction(finish)
        else:
            decision = decide()
    await ctx._fp.reached(FINISH_AFTER)
    return decision


async def rearm_failure(ctx: PassContext, observed: _Observed) -> AlarmDecision:
    """Back off the failed pass and decide the alarm; see :class:`.Maintenance`.

    Reads the generation record first: should storage refuse even that (unavailable), the
    backoff is kept in memory instead (:func:`_rearm_unrecorded`), so owed work keeps an
    alarm; only a refused alarm write propagates, leaving the platform's retry.
    """
    await ctx._fp.reached(RETRY_BEFORE)
    now = ctx._clock.now_ms()
    with ctx._gate.snapshot() as active:

        def rearm() -> AlarmDecision:
            current = generation.read_state(ctx._storage)
            gen = observed.generation
            if gen is not None and observed.actionable:
                not_before, stalls = _backoff(ctx, current, gen, now)
                generation.set_retry(
                    ctx._storage, NativeRetry(gen, not_before, True, stalls + 1))
                # A producer that raced the failed observation is never postponed.
                raced = active > 0 or current.dirty != gen
                ctx._queue.checkpoint_native(
                    now + ctx._alarm.min_delay_ms if raced else not_before)
            else:
                _back_off_pass(ctx, current, observed, now, active)
            return ctx._alarm.decide(now)

        try:
            decision = ctx._storage.transaction(rearm)
        except ThreadlineError:
            decision = _rearm_unrecorded(ctx, now)
        else:
            ctx._unrecorded_stalls = 0
    await ctx._fp.reached(RETRY_AFTER)
    return decision


def _rearm_unrecorded(ctx: PassContext, now: int) -> AlarmDecision:
    """Re-arm a failed pass whose backoff storage would not record: ``base * 2^stalls`` from
    now (jittered, capped), counted in memory across such passes, in the alarm slot alone.
    Nothing is known of what is owed, so it is re-armed whatever the due queue says; an alarm
    already set sooner (a producer's, during the pass) is kept."""
    delay = backoff_ms(ctx._unrecorded_stalls, ctx._config, ctx._rng)
    ctx._unrecorded_stalls += 1
    at = now + max(delay, ctx._alarm.min_delay_ms)
    known = ctx._storage.known_alarm()
    if known is None or known > at:
        ctx._storage.set_alarm(at)
    return AlarmDecision.REARMED


def _back_off_pass(
    ctx: PassContext, current: generation.MaintenanceState, observed: _Observed, now: int,
    active: int,
) -> None:
    """Back off a pass that failed outside native work, before its begin read the record
    (storage refusing that read, a failing registry reconcile), say: it served nothing, so
    the whole pass waits. The retry record of the current generation counts the stalls
    (durable: a new incarnation goes on from them) and every lane due before its
    ``not_before`` is deferred to it, so that nothing rebuilt from the queue arms the
    alarm sooner. A producer that committed during the pass is never postponed: then
    nothing is backed off; nor is anything when no lane is due at all (nothing is owed).
    """
    raced = (active > 0 or ctx._gate.revision != observed.revision
             or (observed.generation is not None and current.dirty != observed.generation))
    if raced or ctx._queue.next() is None:
        return
    gen = current.dirty
    not_before, stalls = _backoff(ctx, current, gen, now)
    generation.set_retry(ctx._storage, NativeRetry(gen, not_before, False, stalls + 1))
    ctx._queue.defer(not_before)


def _backoff(
    ctx: PassContext, current: generation.MaintenanceState, gen: int, now: int
) -> tuple[int, int]:
    """``(not_before, stalls so far)`` for one more failure of generation ``gen``: the
    jittered ``base * 2^stalls`` from now, never earlier than the retry already recorded."""
    retry = current.retry
    previous = retry if retry is not None and retry.generation == gen else None
    stalls = 0 if previous is None else previous.stalls
    not_before = max(0 if previous is None else previous.not_before,
                     now + backoff_ms(stalls, ctx._config, ctx._rng))
    return not_before, stalls
