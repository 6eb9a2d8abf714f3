"""Live subscribers of an object's changes: the event streams that are open right now.

A stream does not poll storage. It remembers the gate's in-process revision before each read,
then sleeps until the gate reports a newer one (a producer committed) or its heartbeat is due.
The set of open subscriptions is in memory only: after eviction every stream has ended with
its connection, and a client resumes from the last history seq it saw.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Protocol

from threadline.clock import Clock
from threadline.clock import timer as clock_timer


class ChangeFeed(Protocol):
    """In-process change notifications (the mutation gate provides them)."""

    @property
    def revision(self) -> int:
        """A counter that moves whenever a producer commits."""
        ...

    async def await_change(self, revision: int) -> None:
        """Return once :attr:`revision` differs from ``revision``."""
        ...


class Subscription:
    """One open stream's wake-up source. Closing it removes it from its :class:`Subscribers`."""

    def __init__(self, owner: Subscribers, feed: ChangeFeed, clock: Clock) -> None:
        self._owner = owner
        self._feed = feed
        self._clock = clock

    @property
    def revision(self) -> int:
        """The feed's revision now: take it before reading, so no later commit is missed."""
        return self._feed.revision

    async def wait_either(
        self, revision: int, until_ms: int, other: asyncio.Future[None]
    ) -> tuple[bool, bool]:
        """Sleep until the feed moves past ``revision``, ``other`` resolves, or the clock
        reaches ``until_ms``: (the feed moved, ``other`` resolved); both False on the deadline.
        Whatever did not finish is cancelled, ``other`` included, so a long-lived stream
        leaves no timers or waiters behind."""
        change = asyncio.ensure_future(self._feed.await_change(revision))
        # The clock's timer, not a task sleeping on it: under Pyodide a cancelled asyncio
        # sleep leaves its JavaScript timeout active until it would have fired, and a stream
        # woken by every delta of a streamed answer would pile up one per wake (workerd
        # allows an event 10,000; fifty Threads streaming 200 tokens reached it).
        deadline = clock_timer(self._clock, until_ms)
        try:
            done, _ = await asyncio.wait({change, deadline, other},
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (change, deadline, other):
                if not task.done():
                    task.cancel()
                    with suppress(asyncio.CancelledError):
                        await task
        return change in done, other in done

    def close(self) -> None:
        """Leave the set of open subscriptions; closing twice changes nothing."""
        self._owner.discard(self)


class Subscribers:
    """The object's open subscriptions."""

    def __init__(self) -> None:
        self._open: set[Subscription] = set()

    def open(self, feed: ChangeFeed, clock: Clock) -> Subscription:
        """Register a new subscription to ``feed``."""
        subscription = Subscription(self, feed, clock)
        self._open.add(subscription)
        return subscription

    def discard(self, subscription: Subscription) -> None:
        """Forget ``subscription`` (nothing happens if it is already gone)."""
        self._open.discard(subscription)

    def __len__(self) -> int:
        return len(self._open)


__all__ = ["ChangeFeed", "Subscribers", "Subscription"]
