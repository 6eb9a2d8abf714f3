"""The wave of one lane as the code inside it sees it, and the bound its handler runs under.

:class:`Wave` is what a handler (and whatever it awaits) finds with :func:`current_wave` to
report its progress or fix its next deadline; :func:`running` makes it current for one wave.
:func:`bounded` runs a handler until its wave's deadline on the injected clock, cancels it past
that and abandons it when it ignores the cancellation for ``cancel_grace_ms``. The lane runner
(:mod:`threadline.maintenance.lanes`) drives both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from threadline.abandonment import Abandoned, contained
from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import Evicted, SchedulingError
from threadline.scheduling import DueQueue, Lane
from threadline.storage.port import Storage


class Wave:
    """The running wave of one lane, as the code inside it sees it (see :func:`current_wave`).

    The lane runner makes one per claimed wave; a handler (and whatever it awaits) finds it
    with :func:`current_wave` and reports its progress through it.
    """

    __slots__ = ("_clock", "_config", "_due_by", "_ended", "_fallback", "_progressed", "_queue",
                 "_storage", "lane_id")

    def __init__(
        self,
        lane_id: str,
        storage: Storage,
        queue: DueQueue,
        clock: Clock,
        config: RuntimeConfig,
        *,
        claimed: Lane | None = None,
    ) -> None:
        #: The lane this wave serves.
        self.lane_id = lane_id
        self._storage = storage
        self._queue = queue
        self._clock = clock
        self._config = config
        self._progressed = False
        self._ended = False
        self._due_by: int | None = None
        # The claim's crash fallback (due_at, not_before): nothing but this wave's own
        # completion moves the lane later while it runs, so a deadline at or after both needs
        # no write.
        self._fallback = None if claimed is None else (claimed.due_at, claimed.not_before)

    @property
    def progressed(self) -> bool:
        """Whether progress the wave reported has committed."""
        return self._progressed

    @property
    def ended(self) -> bool:
        """Whether the runner is done with the wave (its handler returned, failed, or was
        abandoned); its progress is refused from then on."""
        return self._ended

    def progress(self) -> None:
        """Record that this wave moved its lane's work forward (an event acknowledged, a batch
        delivered); call it inside the transaction that commits that step.

        The lane's stalls reset with the step (see :meth:`DueQueue.replenish`), so a wave that
        progresses never counts toward parking, and should the object be lost mid-wave the lane
        is due again within ``alarm_backoff_base_ms``. The wave counts as progressed (see
        :attr:`progressed`) only once that transaction commits: one rolled back reset nothing.
        Raises :class:`SchedulingError` outside a transaction (the reset could commit without
        its step, or the step without it) and once the wave has ended: the handler's time is
        over, so its transaction rolls back.
        """
        if self._ended:
            raise SchedulingError(
                f"the wave of lane {self.lane_id!r} has ended: its handler commits nothing more")
        if not self._storage.in_transaction():
            raise SchedulingError("Wave.progress() must run inside the step's transaction")
        fallback = self._clock.now_ms() + self._config.alarm_backoff_base_ms
        self._queue.replenish(self.lane_id, fallback)
        self._storage.after_commit(self._committed)

    def _committed(self) -> None:
        self._progressed = True

    @property
    def due_by_ms(self) -> int | None:
        """The deadline set with :meth:`due_by`, or None."""
        return self._due_by

    def due_by(self, at_ms: int) -> None:
        """The lane is due again no later than ``at_ms`` (epoch ms), however this wave ends.

        For work whose next deadline is known before the wave does anything, such as a
        schedule's next fire time: should the wave fail or overrun, neither its backoff nor a
        parking's hourly floor postpones the lane past ``at_ms`` (the lane stays parked and
        backs off from anything earlier). A wave that completes still names its own next
        deadline. The last call wins for the wave's end.

        The claim's crash fallback is brought forward to ``at_ms`` at once, durably: in the
        current transaction (call it in the one that fixed the deadline) or else in one of its
        own. So a wave that never reaches its end, lost with the object or cancelled from
        outside (a pass whose native work failed), leaves its lane due by then too. Raises
        :class:`SchedulingError` once the wave has ended.
        """
        if self._ended:
            raise SchedulingError(
                f"the wave of lane {self.lane_id!r} has ended: its deadline is no longer its own")
        due_by = int(at_ms)
        self._due_by = due_by
        fallback = self._fallback
        if (fallback is not None and fallback[0] is not None
                and fallback[0] <= due_by and fallback[1] <= due_by):
            return  # the claim already has the lane due by then

        def bring_forward() -> None:
            self._queue.bring_forward(self.lane_id, due_by)

        if self._storage.in_transaction():
            bring_forward()
        else:
            self._storage.transaction(bring_forward)

    def end(self) -> None:
        """The runner is done with the wave."""
        self._ended = True


_current_wave: ContextVar[Wave | None] = ContextVar("threadline_lane_wave", default=None)


def current_wave() -> Wave | None:
    """The lane wave the calling code runs in, or None outside any wave.

    Tasks a handler creates inherit it, and keep it after the wave ended (then its progress
    is refused).
    """
    return _current_wave.get()


class WaveTimedOut(Exception):
    """The handler outran its wave's deadline and was cancelled."""


class WaveAbandoned(WaveTimedOut):
    """The handler outran its wave and ignored the cancellation for ``cancel_grace_ms``."""


@contextmanager
def running(wave: Wave) -> Iterator[None]:
    """Make ``wave`` the current wave of the handler started inside; end it on the way out."""
    token = _current_wave.set(wave)
    try:
        yield
    finally:
        wave.end()
        _current_wave.reset(token)


#: What a lane handler may let out of its wave: the (simulated) loss of the object. Anything
#: else it raises fails the wave, ``SystemExit`` and ``KeyboardInterrupt`` too (nothing in the
#: platform stops Python code that way: one is the handler's doing).
_PROPAGATES = (Evicted,)


async def bounded(
    work: Callable[[], Awaitable[int | None]],
    deadline: int,
    *,
    clock: Clock,
    abandoned: Abandoned,
    config: RuntimeConfig,
) -> int | None:
    """Await what ``work`` makes until ``deadline`` on the clock; past it, cancel it and raise
    :class:`WaveTimedOut` (:class:`WaveAbandoned` when it ignored the cancellation for the
    grace)."""
    task = asyncio.ensure_future(contained(work))
    timer = asyncio.ensure_future(clock.sleep_until(deadline))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        # Cancelled from outside (the pass failed): nothing waits for the handler now.
        task.cancel()
        abandoned.keep(task)
        raise
    finally:
        timer.cancel()
    if not task.done():
        if not await abandoned.stop(task, clock, config.cancel_grace_ms):
            raise WaveAbandoned
        unwound = None if task.cancelled() else task.exception()
        if isinstance(unwound, _PROPAGATES):
            raise unwound
        raise WaveTimedOut
    if task.cancelled():
        # Nothing cancelled the wave (that would have raised from the wait above): the
        # handler's own code let a CancelledError out. That is its failure, charged like any
        # other; propagating it would cancel the whole pass.
        raise RuntimeError("the lane handler raised CancelledError without being cancelled")
    failure = task.exception()
    if failure is not None and not isinstance(failure, (Exception, *_PROPAGATES)):
        # A foreign BaseException (GeneratorExit, a custom subclass) is the handler's failure
        # too: only a loss of the object or a stop of the host may end the pass.
        raise RuntimeError(f"the lane handler raised {type(failure).__name__}") from failure
    return task.result()


__all__ = [
    "Wave",
    "WaveAbandoned",
    "WaveTimedOut",
    "bounded",
    "current_wave",
    "running",
]
