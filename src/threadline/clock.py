"""Time for the core: a :class:`Clock` protocol, the real clock and a manual one for tests.

The core never reads the wall clock or sleeps on its own; it is handed a ``Clock``. Under
:class:`ManualClock` time moves only when the test moves it, and never backwards, so every
deadline, lease and backoff is reproducible.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@runtime_checkable
class Clock(Protocol):
    """A source of epoch milliseconds and a way to wait for one."""

    def now_ms(self) -> int:
        """The current time in epoch milliseconds."""
        ...

    async def sleep_until(self, epoch_ms: int) -> None:
        """Return once ``now_ms() >= epoch_ms`` (at once if that already holds)."""
        ...


class SystemClock:
    """The wall clock, used in production."""

    def now_ms(self) -> int:
        """The current wall-clock time in epoch milliseconds."""
        return time.time_ns() // 1_000_000

    async def sleep_until(self, epoch_ms: int) -> None:
        """Sleep on the event loop until the wall clock reaches ``epoch_ms``."""
        delay = epoch_ms - self.now_ms()
        if delay > 0:
            await asyncio.sleep(delay / 1000)

    def timer(self, epoch_ms: int) -> asyncio.Future[None]:
        """A future resolved once the wall clock reaches ``epoch_ms`` (see :func:`timer`).

        One timer handle on the event loop, no task: cancelling the future cancels it.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        handle = loop.call_later(max(0, epoch_ms - self.now_ms()) / 1000, _resolve, done)
        done.add_done_callback(lambda _: handle.cancel())
        return done


class ManualClock:
    """A clock that moves only when told to, and never backwards.

    Sleepers registered with :meth:`sleep_until` wake in deadline order (ties in arrival order)
    when :meth:`advance` or :meth:`set` moves time past their deadline.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        if start_ms < 0:
            raise ValueError("start_ms must be >= 0")
        self._now = start_ms
        self._arrivals = itertools.count()
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []

    def now_ms(self) -> int:
        """The clock's current time in epoch milliseconds."""
        return self._now

    def advance(self, ms: int) -> None:
        """Move time forward by ``ms`` milliseconds; a negative step raises ``ValueError``."""
        if ms < 0:
            raise ValueError(f"time cannot go backwards (advance by {ms} ms)")
        self.set(self._now + ms)

    def set(self, epoch_ms: int) -> None:
        """Move time to ``epoch_ms``; an earlier time raises ``ValueError``."""
        if epoch_ms < self._now:
            raise ValueError(
                f"time cannot go backwards (from {self._now} to {epoch_ms})"
            )
        self._now = epoch_ms
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, waiter = heapq.heappop(self._sleepers)
            if not waiter.done():
                waiter.set_result(None)

    def next_deadline(self) -> int | None:
        """The earliest deadline a sleeper waits for, or None when nobody sleeps."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    async def sleep_until(self, epoch_ms: int) -> None:
        """Suspend until a test moves time to ``epoch_ms`` or later."""
        if epoch_ms <= self._now:
            await asyncio.sleep(0)
            return
        await self.timer(epoch_ms)

    def timer(self, epoch_ms: int) -> asyncio.Future[None]:
        """A future a test resolves by moving time to ``epoch_ms`` or later (see
        :func:`timer`); ``epoch_ms`` must be in the future."""
        if epoch_ms <= self._now:
            raise ValueError("a timer is for a time still to come")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (epoch_ms, next(self._arrivals), waiter))
        return waiter


def timer(clock: Clock, epoch_ms: int) -> asyncio.Future[None]:
    """A future resolved once ``clock`` reaches ``epoch_ms``; cancel it to stop waiting.

    For racing work against a deadline (``asyncio.wait``): with the clocks of this module it
    is a bare future, where a task sleeping on :meth:`Clock.sleep_until` would cost a task's
    creation and its steps on the event loop, each a crossing into JavaScript under Pyodide.
    Any other clock, or a time already reached, gets that task.
    """
    make = getattr(clock, "timer", None)
    if make is not None and epoch_ms > clock.now_ms():
        made: asyncio.Future[None] = make(epoch_ms)
        return made
    return asyncio.ensure_future(clock.sleep_until(epoch_ms))


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def to_epoch_ms(at: object) -> int:
    """An aware ``datetime`` in epoch milliseconds, a fraction of one rounded up.

    Raises ``ValueError`` for a naive datetime (it names no instant) and ``TypeError`` for
    anything else. Rounding up keeps a deadline from ever falling due early.
    """
    if not isinstance(at, datetime):
        raise TypeError(f"expected an aware datetime, got {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("a naive datetime names no instant: give it a time zone "
                         "(datetime.now(UTC), or .replace(tzinfo=UTC))")
    whole, part = divmod(at - _EPOCH, _MS)
    return whole + (1 if part else 0)


def from_epoch_ms(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC ``datetime`` (exact)."""
    return _EPOCH + timedelta(milliseconds=ms)


__all__ = ["Clock", "ManualClock", "SystemClock", "from_epoch_ms", "timer", "to_epoch_ms"]
