"""Running user code in a task of its own: the rules for agents, lane handlers and subscribers.

Stopping a task that may ignore its cancellation:

A cancelled task gets ``cancel_grace_ms`` on the injected clock to unwind. One that is still
running then is *abandoned*: nobody awaits it any more, but it stays referenced until it ends
(so the event loop does not collect a running coroutine) and its outcome is discarded. Its
owner makes sure nothing it does afterwards commits (a revoked Turn, an ended lane wave).

Containing an exit: asyncio re-raises ``SystemExit`` and ``KeyboardInterrupt`` out of the
event loop from whichever task raised them, so one raised by user code would end the alarm
handler and every other Thread's Attempt with it. Nothing in the platform stops Python code
that way, so user code's task runs :func:`contained`, which carries one out as
:class:`ExitRaised`, an ordinary exception its owner turns into that code's failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from threadline.clock import Clock

T = TypeVar("T")


class ExitRaised(Exception):
    """User code raised ``SystemExit`` or ``KeyboardInterrupt`` (``raised``) in its task."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(f"{type(raised).__name__}: {raised}")
        self.raised = raised


async def contained(work: Callable[[], Awaitable[T]]) -> T:
    """Await what ``work`` makes, carrying a ``SystemExit`` or ``KeyboardInterrupt`` out as
    :class:`ExitRaised` (run it as the task's coroutine: see the module docstring).

    ``work`` is called only once the task starts, so a task cancelled before its first step
    leaves no user coroutine behind that was made and never awaited.
    """
    try:
        return await work()
    except (SystemExit, KeyboardInterrupt) as exc:
        raise ExitRaised(exc) from exc


class Abandoned:
    """The tasks one owner abandoned that are still running."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def keep(self, task: asyncio.Future[Any]) -> None:
        """Abandon ``task`` if it is still running: referenced until it ends, outcome dropped."""
        if not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._forget)

    async def stop(self, task: asyncio.Future[Any], clock: Clock, grace_ms: int) -> bool:
        """Cancel ``task`` and wait up to ``grace_ms`` for it to end; True when it ended.

        False when it ignored the cancellation: it is abandoned (see :meth:`keep`). A
        cancellation of this wait itself cuts the grace short, and a task still running is
        abandoned all the same before the cancellation propagates.
        """
        task.cancel()
        grace = asyncio.ensure_future(clock.sleep_until(clock.now_ms() + grace_ms))
        try:
            await asyncio.wait((task, grace), return_when=asyncio.FIRST_COMPLETED)
        finally:
            grace.cancel()
            self.keep(task)
        return task.done()

    def _forget(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved, so the loop does not report it as never retrieved


__all__ = ["Abandoned", "ExitRaised", "contained"]
