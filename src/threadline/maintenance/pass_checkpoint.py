"""The checkpoint of a maintenance pass: what its native work leaves behind, certified.

With every Attempt joined, :func:`checkpoint` acknowledges the observed generation only if no
producer overlapped the pass and no autonomous work is owed now; work owed now that made no
progress gets a durable native retry, and the native lane is set to the earliest timed
obligation. Input queued behind a suspended head is taken out of the live range there.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from threadline.maintenance.pass_context import PassContext, _nonterminal, _Scan
from threadline.maintenance.pass_state import CHECKPOINT_AFTER, CHECKPOINT_BEFORE, _Observed, _Tally
from threadline.maintenance.view import Need, ThreadView
from threadline.scheduling import PUBLICATION, NativeRetry, backoff_ms
from threadline.scheduling import state as generation
from threadline.threads import transitions, waits
from threadline.threads.model import SubmissionState


async def checkpoint(
    ctx: PassContext, observed: _Observed, tally: _Tally, scan: _Scan
) -> None:
    """Certify what native work left, in one transaction under the gate's snapshot."""
    await ctx._fp.reached(CHECKPOINT_BEFORE)
    with ctx._gate.snapshot() as active:
        ctx._storage.transaction(lambda: _certify(ctx, observed, tally, active, scan))
    await ctx._fp.reached(CHECKPOINT_AFTER)


def _certify(
    ctx: PassContext, observed: _Observed, tally: _Tally, active: int, scan: _Scan
) -> None:
    now = ctx._clock.now_ms()
    current = generation.read_state(ctx._storage)
    # Every Attempt has joined: the scan re-reads the Threads the pass touched and those
    # producers outside the pass named (all of them, had one named none).
    scan.settle_active()
    views = _hold_followers(ctx, scan.current(now, frozenset()))
    nonterminal = _nonterminal(views)
    tally.nonterminal = nonterminal
    pub = ctx._publication
    # Runnable work a required subscriber holds (asked per Thread: a hold, or a seek).
    gated = {} if pub is None or not pub.required else {
        view.thread_id: name for view in views if view.need is Need.RUNNABLE
        and (name := pub.gated_thread(view.thread_id)) is not None}
    # Runnable heads whose limited agent has no start left are due when its rate frees one.
    limited = ctx._permits.held(
        (view for view in views if view.need is Need.RUNNABLE and view.thread_id not in gated),
        now, {})
    # A Thread whose fault transition storage refused is owed too, even with no view.
    owed_now = bool(tally.unrecorded) or any(
        view.need in (Need.RUNNABLE, Need.RECOVER) and view.thread_id not in gated
        and view.thread_id not in limited for view in views)
    timed = [view.due_at for view in views
             if view.need in (Need.TIMED, Need.FAULTED) and view.due_at is not None]
    timed.extend(limited.values())
    # Runnable work held by the required gate is due when its subscriber can deliver what
    # it owes of that Thread: now when it merely ran out of its wave, at the retry of the
    # Thread's hold (or of the subscriber) when it backs off, never while it is parked (a
    # deploy that bumps its version, removes it or makes it optional wakes native work).
    if pub is not None:
        for thread_id, name in gated.items():
            due = pub.gate_opens_at(name, thread_id, now)
            if due is not None:
                timed.append(due)
    # Suspensions whose timers were not due at the last full scan were not visited: their
    # earliest timer bounds when one can wake (one that fell due since is due now).
    since = scan.scanned_at
    sleeper = waits.next_timer(ctx._storage, now if since is None else since)
    if sleeper is not None:
        timed.append(sleeper)
    overlap = (observed.active_at_start > 0 or active > 0
               or current.dirty != observed.generation)
    gen = observed.generation
    assert gen is not None
    native: int | None
    acknowledged = False
    if overlap:
        native = now + ctx._alarm.min_delay_ms
    elif owed_now:
        if tally.cut_short or tally.settled > 0 or tally.repaired:
            native = now + ctx._alarm.min_delay_ms
        else:
            # Work owed now that made no progress: back the generation off durably.
            retry = current.pending_retry
            stalls = 0 if retry is None else retry.stalls
            not_before = now + backoff_ms(stalls, ctx._config, ctx._rng)
            generation.set_retry(ctx._storage, NativeRetry(gen, not_before, True, stalls + 1))
            native = not_before
    else:
        acknowledged = True
        native = None
    if timed:
        native = min(timed) if native is None else min(native, min(timed))
    if acknowledged:
        generation.acknowledge_counting(ctx._storage, gen, nonterminal)
    else:
        generation.set_nonterminal(ctx._storage, nonterminal)
    # Acknowledged with no producer overlapping: processed reached dirty as the gate
    # counts it now (synchronous, under the snapshot).
    ctx._storage.after_commit(partial(
        ctx._counted, nonterminal, ctx._gate.generations if acknowledged else None))
    if not scan.no_binding_waits:
        ctx._bindings.prune()
    ctx._queue.checkpoint_native(native)
    if pub is not None and pub.declared:
        # The checkpoint replaces the crash fallback, which stood for the records this
        # generation appended too: those still undelivered keep their lane due, or an
        # object lost before the pass's end would owe them with nothing left due.
        undelivered = pub.next_due(now)
        if undelivered is not None:
            ctx._queue.set_due(PUBLICATION, undelivered)


def _hold_followers(ctx: PassContext, views: list[ThreadView]) -> list[ThreadView]:
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
                and transitions.hold_followers(ctx._storage, view.head)):
            view = replace(view, items=tuple(
                replace(item, dormant=True) if item.submission_id in behind else item
                for item in view.items))
        stood.append(view)
    return stood


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
