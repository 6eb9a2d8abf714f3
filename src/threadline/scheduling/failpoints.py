"""Named fault boundaries for tests.

The runtime and the maintenance pass announce each boundary around a durable mutation with
:meth:`Failpoints.hit` (synchronous code) or :meth:`Failpoints.reached` (coroutines). In
production nothing is installed and both only count. Tests install handlers that raise
:class:`~threadline.errors.Evicted` to lose the object at exactly that point, block on an event
to interleave a producer, or just count.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable

from threadline.errors import Evicted, SchedulingError

#: Boundaries of the maintenance substrate and pass, in the order a pass meets them.
MAINTENANCE_LOCATIONS: tuple[str, ...] = (
    "maintenance:dirty:before",
    "maintenance:dirty:after",
    "maintenance:mutation:armed",
    "maintenance:mutation:finished",
    "maintenance:ensure:before",
    "maintenance:ensure:after",
    "maintenance:begin:before",
    "maintenance:begin:after",
    "maintenance:select:before",
    "maintenance:select:after",
    "maintenance:binding-retry:before",
    "maintenance:binding-retry:after",
    "maintenance:recovery-status:before",
    "maintenance:recovery-status:after",
    "maintenance:retry:before",
    "maintenance:retry:after",
    "maintenance:checkpoint:before",
    "maintenance:checkpoint:after",
    "maintenance:finish:before",
    "maintenance:finish:after",
    # After each committed batch of the delayed lane's admissions.
    "maintenance:delayed:admitted",
    # Inside the transaction that admits a message into its own space, before it is marked
    # delivered (a loss there rolls both back).
    "maintenance:messages:admitting",
    # After another space's object answered a message, before the answer is recorded.
    "maintenance:messages:answered",
)
#: Boundaries of the thread runtime (an Attempt and its steps).
RUNTIME_LOCATIONS: tuple[str, ...] = (
    "attempt:claimed",
    "step:started",
    "step:finished",
    "emit:committed",
    "followups:joined",
    "settle:before",
    "settle:after",
)
#: Boundaries of one schedule run (a fire), in the order a run meets them: its fire recorded
#: as pending before the schedule's function is called, the function returned, the run's
#: completion committed.
SCHEDULE_LOCATIONS: tuple[str, ...] = (
    "schedule:fire:recorded",
    "schedule:run:returned",
    "schedule:run:completed",
)
#: Boundaries of one subscriber batch: right before its delivery is called, and after it
#: returned (before its cursor is written).
PUBLICATION_LOCATIONS: tuple[str, ...] = (
    "publication:deliver:before",
    "publication:deliver:after",
)
#: Boundaries of one retention wave (:mod:`threadline.maintenance.retention_lane`): before a
#: Thread's batch is deleted (its transaction not begun), inside that transaction between the
#: log's rows and the submissions' (a loss there rolls both back), and after it committed.
RETENTION_LOCATIONS: tuple[str, ...] = (
    "retention:prune:before",
    "retention:prune:deleting",
    "retention:prune:committed",
)
#: Every location :meth:`Failpoints.install` accepts by default.
FAILPOINT_LOCATIONS: frozenset[str] = frozenset(
    MAINTENANCE_LOCATIONS + RUNTIME_LOCATIONS + SCHEDULE_LOCATIONS + PUBLICATION_LOCATIONS
    + RETENTION_LOCATIONS
)

#: A handler gets the location; it may raise, or return an awaitable for :meth:`reached`.
FailpointHandler = Callable[[str], Awaitable[None] | None]


class Failpoints:
    """Failpoint registry of one object. Without handlers it is inert (it only counts)."""

    def __init__(self, locations: Iterable[str] = FAILPOINT_LOCATIONS) -> None:
        self._known = frozenset(locations)
        self._handlers: dict[str, FailpointHandler] = {}
        self._hits: Counter[str] = Counter()

    @property
    def locations(self) -> frozenset[str]:
        """The locations this registry accepts."""
        return self._known

    def install(self, location: str, handler: FailpointHandler) -> None:
        """Run ``handler`` whenever ``location`` is reached; unknown names are refused."""
        if location not in self._known:
            raise SchedulingError(f"unknown failpoint location {location!r}")
        self._handlers[location] = handler

    def clear(self, location: str | None = None) -> None:
        """Remove the handler of ``location``, or every handler; hit counts are kept."""
        if location is None:
            self._handlers.clear()
        else:
            self._handlers.pop(location, None)

    def hits(self, location: str) -> int:
        """How many times ``location`` was reached."""
        return self._hits[location]

    def _arrive(self, location: str) -> object:
        """Count the arrival and run the handler, if any; return what it returned."""
        self._hits[location] += 1
        handler = self._handlers.get(location)
        return None if handler is None else handler(location)

    def hit(self, location: str) -> None:
        """Announce ``location`` from synchronous code; the handler may raise (e.g. ``Evicted``).

        An asynchronous handler cannot be awaited here and is a test bug: refused.
        """
        result = self._arrive(location)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise SchedulingError(f"failpoint {location!r} has an async handler; use reached()")

    async def reached(self, location: str) -> None:
        """Announce ``location`` from a coroutine, awaiting an asynchronous handler."""
        result = self._arrive(location)
        if inspect.isawaitable(result):
            await result

    def evict_at(self, location: str, *, after: int = 0) -> None:
        """Raise :class:`Evicted` at ``location`` once it has been passed ``after`` times."""
        passed = 0

        def evict(reached: str) -> None:
            nonlocal passed
            if passed >= after:
                raise Evicted(reached)
            passed += 1

        self.install(location, evict)

    def block_at(self, location: str) -> FailpointGate:
        """Make coroutines reaching ``location`` wait until the returned gate is released."""
        gate = FailpointGate()
        self.install(location, gate.wait)
        return gate


class FailpointGate:
    """A pause installed by :meth:`Failpoints.block_at`: ``arrived`` is set, then it waits."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self._released = asyncio.Event()

    async def wait(self, location: str) -> None:
        """Signal arrival and wait for :meth:`release`."""
        self.arrived.set()
        await self._released.wait()

    def release(self) -> None:
        """Let every waiter (present and future) through."""
        self._released.set()


__all__ = [
    "FAILPOINT_LOCATIONS",
    "MAINTENANCE_LOCATIONS",
    "PUBLICATION_LOCATIONS",
    "RETENTION_LOCATIONS",
    "RUNTIME_LOCATIONS",
    "SCHEDULE_LOCATIONS",
    "FailpointGate",
    "FailpointHandler",
    "Failpoints",
]
