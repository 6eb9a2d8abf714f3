"""The object's one alarm slot, as a cache of the due queue.

The platform gives a Durable Object a single alarm. Every timed obligation lives in the due
queue; the slot only has to fire no later than the earliest of them. Producers therefore only
ever move the slot earlier (:meth:`AlarmService.ensure_by`), and a maintenance pass ends with an
exact decision derived from the queue (:meth:`AlarmService.decide`).

Writes go through the storage port, so a slot change made inside a transaction commits or rolls
back with the SQL around it.

The slot cannot be read synchronously on Cloudflare, so :meth:`AlarmService.ensure_by` compares
with ``storage.known_alarm()``: the last value this incarnation wrote or read. That view can be
stale in one direction only, after the platform fired the alarm and emptied the slot: a producer
then skips its write. That is safe because a fired alarm always runs a handler, which refreshes
the view (``get_alarm()``) and ends with :meth:`AlarmService.decide`, an exact write derived from
the durable queue. A fresh incarnation knows nothing (None) and so writes; nothing else writes
the slot. Exact decisions never consult the view.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.scheduling.due_queue import DueQueue, backoff_ms
from threadline.storage.port import Storage


class AlarmDecision(StrEnum):
    """How a decision point left the slot."""

    REARMED = "rearmed"
    CLEARED = "cleared"


class AlarmService:
    """Reads and writes the alarm slot under the multiplexing rules."""

    def __init__(
        self, storage: Storage, clock: Clock, config: RuntimeConfig, due_queue: DueQueue
    ) -> None:
        self._storage = storage
        self._clock = clock
        self._config = config
        self._queue = due_queue
        # In-memory only: a fresh incarnation runs no pass, and a wake dropped with it was a
        # hint on top of an alarm that was already committed.
        self._passes = 0

    @property
    def min_delay_ms(self) -> int:
        """The earliest a producer arms the slot ahead of now (see ``RuntimeConfig``)."""
        return self._config.min_alarm_delay_ms

    @property
    def passes_running(self) -> int:
        """How many maintenance passes are inside :meth:`wakes_deferred`."""
        return self._passes

    def scheduled(self) -> int | None:
        """The slot as this incarnation last wrote or read it (epoch ms), or None.

        A view, not a platform read: after the alarm fired it still shows the fired deadline
        until the handler refreshes it (see the module docstring).
        """
        return self._storage.known_alarm()

    def schedule_at(self, epoch_ms: int) -> None:
        """Replace the slot with ``epoch_ms``."""
        self._storage.set_alarm(int(epoch_ms))

    def ensure_by(self, epoch_ms: int) -> None:
        """Keep the earlier of the slot and ``epoch_ms``: a producer never delays the alarm."""
        existing = self._storage.known_alarm()
        if existing is None or existing > epoch_ms:
            self._storage.set_alarm(int(epoch_ms))

    def ensure_due(self, now: int | None = None) -> int | None:
        """Ensure the slot fires by ``max(earliest due, now + min_delay)``; return that bound.

        This is the producer half of the alarm invariant: called in the transaction that
        enrolled work, it commits with it. Does nothing when no lane is due.
        """
        bound = self._bound(now)
        if bound is not None:
            self.ensure_by(bound)
        return bound

    def decide(self, now: int | None = None) -> AlarmDecision:
        """The pass's exact decision: arm ``max(earliest due, now + min_delay)`` or clear.

        Unlike :meth:`ensure_by` this may move the slot later: it runs where the queue has just
        been checkpointed, so a later slot is the truth rather than a lost wake.
        """
        return self._storage.transaction(lambda: self._apply(self._bound(now)))

    def decide_known(self, now: int, earliest: int | None) -> AlarmDecision:
        """:meth:`decide` from an ``earliest`` due the caller read itself.

        Only for a pass that changed no lane since it read ``earliest`` and saw no producer
        commit meanwhile (the gate's revision is unchanged): the queue is then what it read,
        and the decision saves the read.
        """
        at = max(earliest, now + self.min_delay_ms) if earliest is not None else None
        return self._storage.transaction(lambda: self._apply(at))

    def _apply(self, bound: int | None) -> AlarmDecision:
        if bound is None:
            self._storage.delete_alarm()
            return AlarmDecision.CLEARED
        self._storage.set_alarm(bound)
        return AlarmDecision.REARMED

    def schedule_now(self) -> None:
        """Ask for a prompt pass if anything is due; a droppable hint.

        It does nothing while a pass runs: writing an earlier alarm under a running handler
        may cancel it on the platform, and the pass's final decision observes the durable
        queue and generation anyway, so nothing is lost by dropping the hint.
        """
        if self._passes > 0:
            return

        def arm() -> None:
            earliest = self._queue.next()
            if earliest is not None:
                self.ensure_by(max(self._clock.now_ms(), earliest))

        self._storage.transaction(arm)

    @contextmanager
    def wakes_deferred(self) -> Iterator[None]:
        """Run a maintenance pass body with :meth:`schedule_now` deferred (usable around awaits)."""
        self._passes += 1
        try:
            yield
        finally:
            self._passes -= 1

    def _bound(self, now: int | None) -> int | None:
        """``max(earliest due, now + min_delay)``, or None when no lane is due."""
        earliest = self._queue.next()
        if earliest is None:
            return None
        at = self._clock.now_ms() if now is None else now
        return max(earliest, at + self.min_delay_ms)

    def cancel(self) -> None:
        """Empty the slot. Correctness-sensitive clears go through :meth:`decide` instead."""
        self._storage.delete_alarm()


__all__ = ["AlarmDecision", "AlarmService", "backoff_ms"]
