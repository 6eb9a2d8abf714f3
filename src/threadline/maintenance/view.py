"""What each Thread with open work needs from the maintenance pass, from control state only.

The pass classifies each Thread it visits (those with live, due or faulted work) from the
control columns of its open submissions (no input, journal or history is decoded) plus, for a
suspended head, its open waits:

* ``RUNNABLE``: its head can run now (claimable and due, or an accepted abort to settle);
* ``RECOVER``: recovery has something to decide before anything can run (a lost claim, due
  timers of a suspension, or a recovery fault whose retry time came);
* ``TIMED``: nothing to do before ``due_at`` (a backoff, a timer, an unstamped lease);
* ``STABLE``: waiting for the outside world (an approval, an operator's resolution of an
  Unknown Outcome, a binding wait). It keeps no alarm armed, and plain queued followers behind
  it stay dormant: FIFO holds. Those behind a suspended head (on an approval, or a timer that
  is not due) leave the live range with it at the pass's checkpoint, so the Thread is not read
  again until that wait can change;
* ``FAULTED``: skipped until the fault's ``retry_at``;
* ``ACTIVE``: this incarnation is running its Attempt; nobody touches it.

Only recovered uncertainty releases later input: the head is the first open submission that is
not an Unknown Outcome (nor input joined into a running head). An accepted abort keeps FIFO.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Set
from dataclasses import dataclass
from enum import StrEnum
from itertools import groupby

from threadline.errors import ThreadlineError
from threadline.storage.port import Storage
from threadline.threads import waits
from threadline.threads.model import CLAIMABLE, SubmissionState, WaitKind, WorkItem


class Need(StrEnum):
    """What a Thread needs from the pass now."""

    RUNNABLE = "runnable"
    RECOVER = "recover"
    TIMED = "timed"
    STABLE = "stable"
    FAULTED = "faulted"
    ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class ThreadView:
    """One Thread's open submissions (FIFO) and what it needs."""

    thread_id: str
    items: tuple[WorkItem, ...]
    head: WorkItem | None
    need: Need
    due_at: int | None = None
    #: The Thread has a recovery fault (due or not).
    faulted: bool = False

    @property
    def submission_ids(self) -> tuple[str, ...]:
        """The Thread's open submissions, for fault recipients."""
        return tuple(item.submission_id for item in self.items)


def head_of(items: Iterable[WorkItem]) -> WorkItem | None:
    """The first open submission that is neither an Unknown Outcome nor joined input."""
    for item in items:
        if item.state not in (SubmissionState.UNKNOWN, SubmissionState.JOINED):
            return item
    return None


def classify(
    storage: Storage,
    items: Iterable[WorkItem],
    now: int,
    *,
    active: Set[str],
    faults: Mapping[str, int],
    parked: Set[str],
    registered: Container[str],
) -> list[ThreadView]:
    """One :class:`ThreadView` per Thread among ``items`` (ordered by thread, then seq).

    ``faults`` maps faulted Threads to their ``retry_at``; ``parked`` are the submissions
    with a binding wait: a Thread whose head is one of them stays parked while that head's
    agent is not in ``registered``.
    """
    views: list[ThreadView] = []
    for thread_id, group in groupby(items, key=lambda item: item.thread_id):
        chosen = tuple(group)
        head = head_of(chosen)
        try:
            need, due = _need(storage, thread_id, head, now, active, faults, parked, registered)
        except (ThreadlineError, ValueError, KeyError):
            # This Thread's records cannot be classified: its recovery will say why and
            # become its recovery fault, instead of failing the pass for every Thread.
            need, due = (Need.ACTIVE, None) if thread_id in active else (Need.RECOVER, None)
        views.append(ThreadView(thread_id, chosen, head, need, due, thread_id in faults))
    return views


def _need(
    storage: Storage,
    thread_id: str,
    head: WorkItem | None,
    now: int,
    active: Set[str],
    faults: Mapping[str, int],
    parked: Set[str],
    registered: Container[str],
) -> tuple[Need, int | None]:
    if thread_id in active:
        return Need.ACTIVE, None
    retry_at = faults.get(thread_id)
    if retry_at is not None:
        if retry_at > now:
            return Need.FAULTED, retry_at
        return Need.RECOVER, None
    if head is None:
        return Need.STABLE, None
    state = head.state
    if state is SubmissionState.RUNNING:
        owner = head.lease_owner
        if owner is not None and "/" in owner:
            return Need.RECOVER, None
        expires = head.lease_expires_at
        if expires is None or expires <= now:
            return Need.RECOVER, None
        return Need.TIMED, expires
    if state is SubmissionState.TERMINALIZING:
        return Need.RUNNABLE, None
    if state in CLAIMABLE:
        if head.submission_id in parked and head.agent not in registered:
            return Need.STABLE, None
        if head.not_before is not None and head.not_before > now:
            return Need.TIMED, head.not_before
        return Need.RUNNABLE, None
    if state is SubmissionState.SUSPENDED:
        pending = waits.open_wait_deadlines(storage, head.submission_id)
        if not pending or any(kind != WaitKind.TIMER.value for kind, _ in pending):
            return Need.STABLE, None
        wake = max(at or 0 for _, at in pending)
        return (Need.RECOVER, None) if wake <= now else (Need.TIMED, wake)
    return Need.STABLE, None


__all__ = ["Need", "ThreadView", "classify", "head_of"]
