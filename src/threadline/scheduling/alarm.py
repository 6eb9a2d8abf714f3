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
the slot.

Inside an alarm handler the view is exact: the platform empties the slot before the handler
runs, the handler refreshes the view first, and from then on only this incarnation writes the
slot (a write made during the handler survives its end; ``tests/workerd`` pins all three). So
a pass's exact decision writes only what differs from the view: nothing when the slot is
empty and nothing is due (no ``deleteAlarm`` is owed unless something armed the slot during
the pass), nothing when the slot already holds the bound. Decisions are made only by passes,
which run only in handlers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from enum import StrEnum

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import ThreadlineError
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
        #: A wake asked for while a pass ran, not yet spent by a decision (see schedule_now).
        self._woken = False

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
        been checkpointed, so a later slot is the truth rather than a lost wake. A wake asked
        for during the pass (:meth:`schedule_now`) is spent here: the slot is then armed
        ``max(earliest due, now)``, as the wake would have armed it between passes.
        """
        prompt = self._woken
        decision = self._storage.transaction(
            lambda: self._apply(self._bound(now, prompt=prompt)))
        self._spent(prompt)
        return decision

    def decide_known(self, now: int, earliest: int | None) -> AlarmDecision:
        """:meth:`decide` from an ``earliest`` due the caller read itself.

        Only for a pass that changed no lane since it read ``earliest`` and saw no producer
        commit meanwhile (the gate's revision is unchanged): the queue is then what it read,
        and the decision saves the read.
        """
        prompt = self._woken
        at = None if earliest is None else max(
            earliest, now if prompt else now + self.min_delay_ms)
        decision = self._storage.transaction(lambda: self._apply(at))
        self._spent(prompt)
        return decision

    def _spent(self, prompt: bool) -> None:
        # Only once the decision committed: a decision rolled back leaves the wake to the
        # next one (the failure re-arming, say). Transactions are synchronous, so no wake
        # can arrive between the read of the flag and here.
        if prompt:
            self._woken = False

    def _apply(self, bound: int | None) -> AlarmDecision:
        # The view is exact inside the handler (see the module docstring): a slot that
        # already is as decided costs no write.
        known = self._storage.known_alarm()
        if bound is None:
            if known is not None:
                self._storage.delete_alarm()
            return AlarmDecision.CLEARED
        if known != bound:
            self._storage.set_alarm(bound)
        return AlarmDecision.REARMED

    def schedule_now(self, due: int | None = None) -> None:
        """Ask for a prompt pass if anything is due: arm ``max(now, earliest due)``.

        A hint: the producer's own commit already armed the alarm a minimum delay away.
        While a pass runs it writes nothing (writing an earlier alarm under a running handler
        may cancel it on the platform); it is deferred instead, and spent by the pass's
        final decision (:meth:`decide`), or armed as the pass ends when it arrived after that
        decision. Deferred, it costs one pass at most, so it cannot make the alarm spin.

        ``due``: a time by which the caller's own commit made a lane due (an admission's
        native lane, due at once). The earliest due is then no later than it, so the slot is
        armed by ``max(now, due)`` without reading the queue; an earlier slot stays.
        """
        if self._passes > 0:
            self._woken = True
            return
        self._arm_now(due)

    def _arm_now(self, due: int | None = None) -> None:
        def arm() -> None:
            earliest = self._queue.next() if due is None else due
            if earliest is not None:
                self.ensure_by(max(self._clock.now_ms(), earliest))

        self._storage.transaction(arm)

    @contextmanager
    def wakes_deferred(self) -> Iterator[None]:
        """Run a maintenance pass body with :meth:`schedule_now` deferred (usable around awaits).

        A wake the body's decision did not spend is armed when the last pass ends normally;
        a body that raised drops it (its own failure handling decided the alarm, or could not).
        """
        self._passes += 1
        ended = False
        try:
            yield
            ended = True
        finally:
            self._passes -= 1
            woken = self._woken and self._passes == 0
            if self._passes == 0:
                self._woken = False
        if ended and woken:
            # Droppable: should storage refuse it, the producer's own alarm still stands.
            with suppress(ThreadlineError):
                self._arm_now()

    def _bound(self, now: int | None, *, prompt: bool = False) -> int | None:
        """``max(earliest due, now + min_delay)`` (``now`` when ``prompt``), or None when no
        lane is due."""
        earliest = self._queue.next()
        if earliest is None:
            return None
        at = self._clock.now_ms() if now is None else now
        return max(earliest, at if prompt else at + self.min_delay_ms)

    def cancel(self) -> None:
        """Empty the slot. Correctness-sensitive clears go through :meth:`decide` instead."""
        self._storage.delete_alarm()


__all__ = ["AlarmDecision", "AlarmService", "backoff_ms"]
