"""Stopping a task that may ignore its cancellation: the one rule for agents and lane handlers.

A cancelled task gets ``cancel_grace_ms`` on the injected clock to unwind. One that is still
running then is *abandoned*: nobody awaits it any more, but it stays referenced until it ends
(so the event loop does not collect a running coroutine) and its outcome is discarded. Its
owner makes sure nothing it does afterwards commits (a revoked Turn, an ended lane wave).
"""

from __future__ import annotations

import asyncio
from typing import Any

from threadline.clock import Clock


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


__all__ = ["Abandoned"]
