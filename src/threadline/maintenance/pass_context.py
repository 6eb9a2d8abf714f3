"""What a maintenance pass works with: the object's parts, the incarnation's memory, and the
running pass's view of open work.

:class:`PassContext` holds the parts and what one incarnation remembers between passes;
:class:`~threadline.maintenance.maintenance_pass.Maintenance` is one, and each phase module of
the pass takes it. :class:`_Scan` is the pass's view of open work, which it reads through the
context (:func:`open_work`), and :func:`_nonterminal` counts open work as a full scan would.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import ThreadlineError
from threadline.maintenance.agent_permits import AgentPermits
from threadline.maintenance.bindings import BindingWaits
from threadline.maintenance.faults import RecoveryFaults
from threadline.maintenance.lanes import LaneRunner
from threadline.maintenance.publication_lane import Publication
from threadline.maintenance.view import Need, ThreadView, classify
from threadline.pause import Pause, no_pause
from threadline.scheduling import Scheduler
from threadline.scheduling import state as generation
from threadline.storage.port import Storage
from threadline.threads import waits
from threadline.threads.model import WorkItem
from threadline.threads.runtime import ThreadRuntime

_logger = logging.getLogger("threadline.maintenance")


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


class PassContext:
    """The parts one incarnation's maintenance pass works with, and what the incarnation
    remembers between passes. The pass's phase modules read and update these attributes."""

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
        #: The limited agents' permits (their Attempts running and recent starts).
        self._permits = AgentPermits(parts.storage, parts.runtime.registry, log=self._log)
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
        #: Passes in a row whose failure could not be re-armed durably (storage refusing even
        #: the generation record): the exponent of the in-memory backoff they re-arm with.
        self._unrecorded_stalls = 0

    def _counted(self, nonterminal: int, processed_at: int | None) -> None:
        self._nonterminal = nonterminal
        if processed_at is not None:
            self._processed_at = processed_at

    def _note_processed(self, state: generation.MaintenanceState) -> None:
        """Remember whether ``state``, read just now, had its generation processed."""
        self._processed_at = (self._gate.generations if state.processed >= state.dirty
                              else None)


class _Scan:
    """The pass's view of open work, refreshed per Thread as its Attempts end.

    Only Threads with work that may be owed now are visited (see :func:`open_work`).
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

    def __init__(self, owner: PassContext) -> None:
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
        :func:`~threadline.maintenance.pass_recovery._observe`)."""
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
            items, self._faults = open_work(owner, now)
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
                note_recipients(owner, views)
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


def open_work(ctx: PassContext, now: int) -> tuple[list[WorkItem], dict[str, int]]:
    """The open submissions of every Thread that may owe work now, and the fault deadlines.

    Visited: Threads with live work (queued, ready, running or terminalizing: the
    ``dormant = 0`` range of the open-work index ``tl_submissions_open``), Threads with
    a timer due at ``now`` (through the due index on open waits), and Threads under a
    recovery fault. A Thread suspended on a timer that is not due, or waiting for the
    outside world, is never read, nor is the input queued behind its suspended head once
    a checkpoint held it (:func:`~threadline.maintenance.pass_checkpoint._hold_followers`):
    the pass's reads follow due and live work, not the number of pending timers or waiting
    Threads. The earliest pending timer is one indexed read at the checkpoint
    (:func:`waits.next_timer`).
    """
    ledger = ctx._runtime.ledger
    deadlines = ctx._faults.deadlines()
    threads = set(ledger.live_threads())
    threads.update(waits.due_timer_threads(ctx._storage, now))
    threads.update(deadlines)
    items = [item for thread_id in sorted(threads) for item in ledger.thread_open(thread_id)]
    return items, deadlines


def note_recipients(ctx: PassContext, views: list[ThreadView]) -> None:
    """Input admitted to a Thread under a fault hears of the fault too (once).

    Should storage refuse it for one Thread, that Thread's new input hears of it at the
    first scan of a later pass (the fault's retry brings one), and the others go on.
    """
    for view in views:
        if view.need is Need.FAULTED:
            try:
                ctx._faults.note_recipients(view.thread_id, view.submission_ids)
            except ThreadlineError as exc:
                ctx._log(f"threadline: could not note the recipients of the recovery "
                         f"fault of thread {view.thread_id!r} ({type(exc).__name__})")


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
