"""Native dispatch in a maintenance pass: the loop that runs Threads' heads.

:func:`dispatch_native` rescans open work as Attempts end, recovers the backlog, and starts at
most ``native_concurrency`` Attempts at once, one head per Thread, round-robin after
``last_served_thread``, until no new Attempt may start (``yield_after_ms``) or the event
deadline cancels those still running. Each dispatched Thread is recovered right before its
Attempt; one parked on an unregistered agent gets a binding wait instead.
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext, suppress
from functools import partial
from typing import Any

from threadline.errors import BindingUnavailable, ThreadlineError
from threadline.maintenance.pass_context import PassContext, _nonterminal, _Scan
from threadline.maintenance.pass_recovery import (
    clear_fault,
    clear_idle_faults,
    fault_blocked,
    fault_status,
    recover,
    recover_backlog,
    set_cursor,
)
from threadline.maintenance.pass_state import (
    BINDING_AFTER,
    BINDING_BEFORE,
    SELECT_AFTER,
    SELECT_BEFORE,
    _Observed,
    _Tally,
)
from threadline.maintenance.view import Need, ThreadView


async def dispatch_native(
    ctx: PassContext, started: int, observed: _Observed, tally: _Tally, scan: _Scan,
    gated: dict[str, str] | None = None,
) -> None:
    """Recover and dispatch the Threads owing work until none is left or a deadline is reached.

    ``gated`` names the Threads whose records a required subscriber has not consumed (None:
    no required subscriber); it gains the Threads whose Attempts appended such records.
    """
    config = ctx._config
    yield_after = started + config.yield_after_ms
    event_deadline = started + config.event_deadline_ms
    tasks: dict[str, asyncio.Task[bool]] = {}
    deferred: set[str] = set()
    recovered: set[str] = set()
    deadline = asyncio.ensure_future(ctx._clock.sleep_until(event_deadline))
    try:
        while True:
            now = ctx._clock.now_ms()
            if now >= event_deadline:
                tally.cut_short = True
                break
            views = scan.current(now, frozenset(tasks))
            tally.nonterminal = _nonterminal(views)
            await clear_idle_faults(ctx, scan, tally)
            # Each Thread is recovered at most once per pass outside its own dispatch.
            backlog = [view for view in views if view.need is Need.RECOVER
                       and view.thread_id not in recovered and view.thread_id not in tasks]
            if backlog:
                recovered.update(view.thread_id for view in backlog)
                await recover_backlog(ctx, backlog, observed, tally, event_deadline)
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
                    for view in await _select(ctx, runnable, free, observed, tally):
                        tally.dispatched += 1
                        tasks[view.thread_id] = asyncio.ensure_future(
                            _attempt(ctx, view, yield_after, tally))
            elif any(view.need is Need.RUNNABLE for view in views):
                tally.cut_short = True
            if not tasks:
                break
            await _await_progress(ctx, tasks, deadline)
            for thread_id, task in list(tasks.items()):
                if task.done():
                    del tasks[thread_id]
                    scan.changed(thread_id)
                    if not task.result():
                        deferred.add(thread_id)
                    if gated is not None and ctx._publication is not None:
                        # What the Attempt appended waits for the required subscribers
                        # before the Thread's next head may run.
                        holder = ctx._publication.gated_thread(thread_id)
                        if holder is not None:
                            gated[thread_id] = holder
            # Requests waiting for the object are served before the next Attempt starts:
            # what they admit is in the next scan.
            await ctx._pause()
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
        scan.current(ctx._clock.now_ms(), frozenset())
        await clear_idle_faults(ctx, scan, tally)


async def _await_progress(
    ctx: PassContext, tasks: dict[str, asyncio.Task[bool]], deadline: asyncio.Future[None]
) -> None:
    """Wait until an Attempt ends, the event deadline passes, or a producer outside the
    pass advanced the generation (new input must not wait for a long Attempt to end)."""
    seen = ctx._gate.generations
    while True:
        change = ctx._gate.changed(ctx._gate.revision)
        waiting: set[asyncio.Future[Any]] = {*tasks.values(), deadline, change}
        try:
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            change.cancel()
        if done - {change} or ctx._gate.generations != seen:
            return


async def _select(
    ctx: PassContext, runnable: list[ThreadView], free: int, observed: _Observed,
    tally: _Tally,
) -> list[ThreadView]:
    """Choose up to ``free`` Threads round-robin after ``last_served_thread``.

    The cursor is stored before the Attempts start only when some runnable Thread is left
    out: then it is what keeps an eviction mid-Attempt from favouring the same Threads
    again. When every runnable Thread is chosen nobody waits behind them, so it is kept
    in memory only (a row written per dispatch saved). Should storage refuse the cursor,
    the Thread it names is not dispatched (see :func:`set_cursor`); the others are.
    """
    ordered = sorted(runnable, key=lambda view: view.thread_id)
    last = observed.last_served
    pivot = next((i for i, view in enumerate(ordered)
                  if last is None or view.thread_id > last), 0)
    chosen = (ordered[pivot:] + ordered[:pivot])[:free]
    await ctx._fp.reached(SELECT_BEFORE)
    newest = chosen[-1]
    if len(ordered) > len(chosen) and not await set_cursor(
            ctx, "last_served_thread", newest, tally):
        # The Thread the cursor names is faulted and not dispatched; the rest still run.
        chosen = chosen[:-1]
    observed.last_served = newest.thread_id
    await ctx._fp.reached(SELECT_AFTER)
    return chosen


async def _attempt(
    ctx: PassContext, view: ThreadView, yield_after: int, tally: _Tally
) -> bool:
    """Recover the Thread, then run one Attempt of its head; True when it settled."""
    recovered = tally.recovered
    if not await recover(ctx, view, tally):
        return False
    # What the scan read, when recovery found nothing to do and nothing changed the
    # Thread since: the claim decides from it instead of reading it a third time.
    known = (ctx._scan.known(view.thread_id)
             if ctx._scan is not None and tally.recovered == recovered else None)
    hint = (nullcontext() if known is None
            else ctx._runtime.ledger.prefetched(view.thread_id, known))
    try:
        with hint:
            settlement = await ctx._runtime.process_thread_head(
                view.thread_id, yield_after=yield_after)
    except BindingUnavailable:
        try:
            head = ctx._runtime.head(view.thread_id)
            if head is not None:
                await ctx._fp.reached(BINDING_BEFORE)
                ctx._bindings.park(view.thread_id, head.submission_id, head.agent)
                if ctx._scan is not None:
                    ctx._scan.parked(view.thread_id, head.submission_id)
                await ctx._fp.reached(BINDING_AFTER)
        except (ThreadlineError, ValueError, KeyError) as exc:
            await fault_blocked(ctx, view, exc, tally)
        return False
    except (ThreadlineError, ValueError, KeyError) as exc:
        await fault_blocked(ctx, view, exc, tally)
        return False
    if ctx._scan is not None and ctx._scan.lifted(view.thread_id):
        # The dispatch that a lifted fault was holding back went through.
        await fault_status(ctx, view.thread_id, tally,
                           partial(clear_fault, ctx, view.thread_id))
    if settlement is None:
        return False
    tally.settled += 1
    return True
