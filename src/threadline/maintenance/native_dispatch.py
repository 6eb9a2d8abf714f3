"""Native dispatch in a maintenance pass: the loop that runs Threads' heads.

:func:`dispatch_native` rescans open work as Attempts end, recovers the backlog, and starts at
most ``native_concurrency`` Attempts at once, one head per Thread, round-robin after
``last_served_thread``, until no new Attempt may start (``yield_after_ms``) or the event
deadline cancels those still running. Each dispatched Thread is recovered right before its
Attempt; one parked on an unregistered agent gets a binding wait instead.

The subscriber waves of the pass run beside it (:class:`Beside`), never awaited before an
Attempt starts: while they run, input admitted meanwhile is dispatched as it comes. A Thread
with records a required subscriber has not consumed is not dispatched; that is asked of each
Thread right before it would be chosen and again right before its Attempt starts, so a record
any producer committed meanwhile is never overtaken (see
:meth:`~threadline.maintenance.publication_lane.Publication.gated_thread`). A Thread whose
head's agent has no permit left (its ``concurrency`` or ``rate``, see
:mod:`~threadline.maintenance.agent_permits`) is passed over until an Attempt of that agent
ends or its rate frees a start.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
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
from threadline.maintenance.publication_lane import Publication
from threadline.maintenance.view import Need, ThreadView


class Beside:
    """The subscriber waves of one pass, beside native work: the round the pass started, and
    one more once it is done with no Attempt running and something is left to deliver (what
    the pass's own Attempts appended, delivered in the same event)."""

    ROUNDS = 2

    def __init__(
        self, publication: Publication, first: asyncio.Future[bool], until: int
    ) -> None:
        self.publication = publication
        self.rounds: list[asyncio.Future[bool]] = [first]
        self._until = until

    def pending(self) -> list[asyncio.Future[bool]]:
        """The rounds still running."""
        return [wave for wave in self.rounds if not wave.done()]

    def running(self, *, attempts: bool) -> list[asyncio.Future[bool]]:
        """The rounds running now, the next one started first when it is due: the last is
        done, no Attempt runs (``attempts``) and something is left to deliver."""
        pending = self.pending()
        if (pending or attempts or len(self.rounds) >= self.ROUNDS
                or not self.publication.behind()):
            return pending
        self.rounds.append(asyncio.ensure_future(self.publication.round(self._until)))
        return self.pending()


class _Gate:
    """Whether a Thread may start, asked per Thread and remembered until it can change: a
    Thread found free is asked again once its own Attempt ended or a producer outside the pass
    committed; one found held, once a subscriber delivered a batch."""

    def __init__(self, ctx: PassContext) -> None:
        pub = ctx._publication
        self._pub = pub if pub is not None and pub.required else None
        self._ctx = ctx
        self._free: set[str] = set()
        self._generations = ctx._gate.generations

    def holds(self, thread_id: str) -> bool:
        if self._pub is None:
            return False
        generations = self._ctx._gate.generations
        if generations != self._generations:
            self._generations = generations
            self._free.clear()
        if thread_id in self._free:
            return False
        if self._pub.gated_thread(thread_id) is not None:
            return True
        self._free.add(thread_id)
        return False

    def changed(self, thread_id: str) -> None:
        self._free.discard(thread_id)


def gated_now(ctx: PassContext, thread_id: str) -> bool:
    """Whether a required subscriber has not consumed a record of ``thread_id`` it wants."""
    pub = ctx._publication
    return pub is not None and bool(pub.required) and pub.gated_thread(thread_id) is not None


async def dispatch_native(
    ctx: PassContext, started: int, observed: _Observed, tally: _Tally, scan: _Scan,
    beside: Beside | None = None,
) -> None:
    """Recover and dispatch the Threads owing work until none is left (and the subscriber
    waves ``beside`` it are done) or a deadline is reached."""
    config = ctx._config
    yield_after = started + config.yield_after_ms
    event_deadline = started + config.event_deadline_ms
    tasks: dict[str, asyncio.Task[bool]] = {}
    #: The limited agent each running Attempt belongs to, by Thread.
    limited: dict[str, str] = {}
    permits = ctx._permits
    wake_at: int | None = None
    deferred: set[str] = set()
    recovered: set[str] = set()
    gate = _Gate(ctx)
    deadline = asyncio.ensure_future(ctx._clock.sleep_until(event_deadline))
    try:
        while True:
            now = ctx._clock.now_ms()
            if now >= event_deadline:
                tally.cut_short = True
                break
            views = scan.current(now, frozenset(tasks))
            wake_at = None
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
                            and not gate.holds(view.thread_id)]
                if free > 0 and runnable:
                    # How many Attempts of each limited agent run.
                    running = Counter(limited.values())
                    for view in await _select(ctx, runnable, free, observed, tally, running):
                        binding = permits.limited_agent(view)
                        if binding is not None:
                            permits.take(binding, now)
                            limited[view.thread_id] = binding.name
                        tally.dispatched += 1
                        tasks[view.thread_id] = asyncio.ensure_future(
                            _attempt(ctx, view, yield_after, tally))
                        # Many Attempts start at once: each one's first stretch (synchronous
                        # work before its first real wait) runs before the next starts, with
                        # the object given back between them, so a request is not held up
                        # behind all of them.
                        await ctx._pause()
                # Heads left waiting for a limited agent's rate are asked again when it frees.
                wake_at = permits.next_free(runnable, now)
            elif any(view.need is Need.RUNNABLE for view in views):
                tally.cut_short = True
            # With no Attempt running, the pass goes on while its subscriber waves do: what
            # they deliver may free a Thread, and input admitted meanwhile runs at once.
            waves = ([] if beside is None or now >= yield_after
                     else beside.running(attempts=bool(tasks)))
            if not tasks and not waves:
                break
            await _await_progress(ctx, tasks, deadline, waves, gate,
                                  None if wake_at is None or wake_at >= yield_after
                                  else wake_at)
            for thread_id, task in list(tasks.items()):
                if task.done():
                    del tasks[thread_id]
                    limited.pop(thread_id, None)
                    scan.changed(thread_id)
                    # What the Attempt appended may hold the Thread's next head.
                    gate.changed(thread_id)
                    if not task.result():
                        deferred.add(thread_id)
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
    ctx: PassContext, tasks: dict[str, asyncio.Task[bool]], deadline: asyncio.Future[None],
    waves: list[asyncio.Future[bool]], gate: _Gate, wake_at: int | None = None,
) -> None:
    """Wait until an Attempt ends, the event deadline passes, a producer outside the pass
    advanced the generation (new input must not wait for a long Attempt to end), a limited
    agent's rate frees a start (``wake_at``), or, with subscriber waves running, one of them
    delivered a batch or ended."""
    seen = ctx._gate.generations
    pub = ctx._publication
    permit = (None if wake_at is None
              else asyncio.ensure_future(ctx._clock.sleep_until(wake_at)))
    try:
        while True:
            change = ctx._gate.changed(ctx._gate.revision)
            waiting: set[asyncio.Future[Any]] = {*tasks.values(), *waves, deadline, change}
            if permit is not None:
                waiting.add(permit)
            delivered = None
            if waves and pub is not None:
                delivered = pub.progressed()
                waiting.add(delivered)
            try:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                change.cancel()
                if delivered is not None:
                    delivered.cancel()
            if done - {change} or ctx._gate.generations != seen:
                return
    finally:
        if permit is not None:
            permit.cancel()


async def _select(
    ctx: PassContext, runnable: list[ThreadView], free: int, observed: _Observed,
    tally: _Tally, running: Mapping[str, int],
) -> list[ThreadView]:
    """Choose up to ``free`` Threads round-robin after ``last_served_thread``, each limited
    agent's no more than its permits allow (``running`` of its Attempts run already), taken
    in that agent's own turn (:meth:`~threadline.maintenance.agent_permits.AgentPermits.allowed`).

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
    permits = ctx._permits
    now = ctx._clock.now_ms()
    allowed = permits.allowed(ordered, now, running)
    chosen: list[ThreadView] = []
    for view in ordered[pivot:] + ordered[:pivot]:
        if len(chosen) == free:
            break
        if view.thread_id in allowed or permits.limited_agent(view) is None:
            chosen.append(view)
    if not chosen:
        # Every runnable Thread waits for a permit: nobody is served, the cursor stays.
        return []
    await ctx._fp.reached(SELECT_BEFORE)
    newest = chosen[-1]
    if len(ordered) > len(chosen) and not await set_cursor(
            ctx, "last_served_thread", newest, tally):
        # The Thread the cursor names is faulted and not dispatched; the rest still run.
        chosen = chosen[:-1]
    observed.last_served = newest.thread_id
    permits.served(chosen)
    await ctx._fp.reached(SELECT_AFTER)
    return chosen


async def _attempt(
    ctx: PassContext, view: ThreadView, yield_after: int, tally: _Tally
) -> bool:
    """Recover the Thread, then run one Attempt of its head; True when it settled."""
    recovered = tally.recovered
    if not await recover(ctx, view, tally):
        return False
    if gated_now(ctx, view.thread_id):
        # A producer committed a record of this Thread since it was chosen (an abort of
        # its head, say): its next work waits for the required subscribers.
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
