"""Recovery in a maintenance pass: recovering Threads and committing their fault status.

:func:`recover_backlog` recovers the Threads that need it and are not dispatched, rotated by
``last_recovered_thread``; :func:`recover` runs one Thread's recovery (native dispatch runs it
before each Attempt too). A Thread whose recovery, cursor write or dispatch storage refused
becomes that Thread's fault (:func:`fault_status`, :func:`fault_blocked`), never the pass's.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from threadline.errors import ThreadlineError
from threadline.maintenance.faults import Fault
from threadline.maintenance.pass_context import PassContext, _Scan
from threadline.maintenance.pass_state import (
    RECOVERY_STATUS_AFTER,
    RECOVERY_STATUS_BEFORE,
    SELECT_AFTER,
    SELECT_BEFORE,
    _Observed,
    _Tally,
)
from threadline.maintenance.view import ThreadView
from threadline.scheduling import state as generation
from threadline.threads.recovery import Disposition, RecoveryBlocked, RecoverySweepResult


async def recover_backlog(
    ctx: PassContext, backlog: list[ThreadView], observed: _Observed, tally: _Tally,
    deadline: int,
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
        if ctx._clock.now_ms() >= deadline:
            tally.cut_short = True
            return
        await ctx._fp.reached(SELECT_BEFORE)
        stored = not durable or await set_cursor(
            ctx, "last_recovered_thread", view, tally)
        await ctx._fp.reached(SELECT_AFTER)
        if stored:
            observed.last_recovered = view.thread_id
            await recover(ctx, view, tally)


async def set_cursor(ctx: PassContext, name: str, view: ThreadView, tally: _Tally) -> bool:
    """Store a round-robin cursor at ``view``'s Thread; False when storage refused it.

    The refusal is that Thread's problem, not the pass's: it becomes the Thread's fault
    (logged, retried at the fault's backoff) and the Thread is left alone this time, as
    when storage refuses its dispatch (:func:`fault_blocked`). Failing the pass would cancel
    the Attempts of every other Thread running.
    """
    thread_id = view.thread_id
    try:
        ctx._storage.transaction(
            lambda: generation.set_cursor(ctx._storage, name, thread_id))
    except ThreadlineError as exc:
        ctx._log(f"threadline: could not store the maintenance cursor {name}"
                 f" ({type(exc).__name__}); thread {thread_id!r} is retried after a backoff")
        await fault_blocked(ctx, view, exc, tally)
        return False
    return True


async def recover(ctx: PassContext, view: ThreadView, tally: _Tally) -> bool:
    """Run recovery for one Thread and commit its fault status; True when not blocked.

    Recovery decides from the open work the scan read when nothing changed it since."""
    known = None if ctx._scan is None else ctx._scan.known(view.thread_id)
    if known is None:
        sweep = ctx._runtime.run_recovery(view.thread_id)
    else:
        with ctx._runtime.ledger.prefetched(view.thread_id, known):
            sweep = ctx._runtime.run_recovery(view.thread_id)
    tally.recovered += len(sweep.reports) + len(sweep.blocked)
    tally.repaired = tally.repaired or any(
        report.disposition is not Disposition.UNKNOWN for report in sweep.reports)
    return await _observe(ctx, view, sweep, tally)


async def _observe(
    ctx: PassContext, view: ThreadView, sweep: RecoverySweepResult, tally: _Tally
) -> bool:
    """Commit what one recovery means for the Thread's fault; True when not blocked.

    A faulted Thread whose recovery succeeded is *lifted*, not cleared: the fault is what
    backs off a dispatch that keeps failing (a claim refused again and again), so it stays
    recorded until the head is dispatched, and a failure meanwhile counts as its next
    attempt (a longer retry, at most a ``changed`` event) instead of a new fault at
    attempt 1 after a ``cleared``. A Thread left with nothing to dispatch has its fault
    cleared by :func:`clear_idle_faults`.
    """
    faulted = view.faulted and not sweep.blocked
    if not sweep.blocked and not faulted:
        return True
    if not sweep.blocked and ctx._scan is not None:
        ctx._scan.lift(view.thread_id)
        return True
    return await fault_status(
        ctx, view.thread_id, tally,
        lambda: ctx._faults.observe(view.thread_id, sweep,
                                    recipients=view.submission_ids, faulted=faulted))


async def clear_idle_faults(ctx: PassContext, scan: _Scan, tally: _Tally) -> None:
    """Clear the faults of Threads with nothing left to dispatch, so their recipients
    hear ``cleared`` and ``/maintenance`` stops listing them."""
    for thread_id in scan.idle_faults():
        if thread_id not in tally.unrecorded:
            await fault_status(ctx, thread_id, tally, partial(clear_fault, ctx, thread_id))


def clear_fault(ctx: PassContext, thread_id: str) -> None:
    ctx._faults.clear(thread_id)


async def fault_status(
    ctx: PassContext, thread_id: str, tally: _Tally, write: Callable[[], Fault | None]
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
    await ctx._fp.reached(RECOVERY_STATUS_BEFORE)
    try:
        fault = write()
    except ThreadlineError as exc:
        tally.unrecorded.add(thread_id)
        ctx._log(f"threadline: could not record the recovery status of thread "
                 f"{thread_id!r} ({type(exc).__name__}); retried with the pass's backoff")
        return False
    tally.unrecorded.discard(thread_id)
    if ctx._scan is not None:
        ctx._scan.fault(thread_id, None if fault is None else fault.retry_at)
    await ctx._fp.reached(RECOVERY_STATUS_AFTER)
    return fault is None


async def fault_blocked(
    ctx: PassContext, view: ThreadView, exc: Exception, tally: _Tally
) -> None:
    """Storage failed (or a record could not be read) while dispatching one Thread, with
    no claim held: nothing of it moved. It becomes that Thread's fault, like a failed
    recovery; failing the pass would cancel the Attempts of every other Thread running."""
    blocked = RecoveryBlocked(view.thread_id, str(exc), type(exc).__name__)
    await _observe(ctx, view, RecoverySweepResult(blocked=(blocked,)), tally)
