"""An abandoned task's outcome is discarded: however it ends (cancelled at last, or failing),
nothing about it reaches the event loop's exception handler, and it is referenced only until
it ends."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from threadline.abandonment import Abandoned


def _reported(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    return seen


def test_an_abandoned_task_that_ends_cancelled_reports_nothing_to_the_loop() -> None:
    async def body() -> list[dict[str, Any]]:
        seen = _reported(asyncio.get_running_loop())
        abandoned = Abandoned()
        task = asyncio.ensure_future(asyncio.Event().wait())
        await asyncio.sleep(0)
        task.cancel()  # asked to stop, not stopped yet: kept until it has unwound
        abandoned.keep(task)
        assert len(abandoned) == 1
        for _ in range(5):
            await asyncio.sleep(0)
        assert task.cancelled() and len(abandoned) == 0
        return seen

    assert asyncio.run(body()) == []


def test_an_abandoned_task_that_fails_reports_nothing_to_the_loop() -> None:
    async def fails_later(go: asyncio.Event) -> None:
        await go.wait()
        raise RuntimeError("failed after it was abandoned")

    async def body() -> list[dict[str, Any]]:
        seen = _reported(asyncio.get_running_loop())
        abandoned = Abandoned()
        go = asyncio.Event()
        task: asyncio.Future[None] | None = asyncio.ensure_future(fails_later(go))
        assert task is not None
        abandoned.keep(task)
        go.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert task.done() and len(abandoned) == 0
        # Nobody will ever look at its outcome: dropping the task must not report it as an
        # exception never retrieved.
        task = None
        gc.collect()
        return seen

    assert asyncio.run(body()) == []


def test_a_finished_task_is_not_kept() -> None:
    async def body() -> int:
        abandoned = Abandoned()
        task = asyncio.ensure_future(asyncio.sleep(0))
        await task
        abandoned.keep(task)
        return len(abandoned)

    assert asyncio.run(body()) == 0
