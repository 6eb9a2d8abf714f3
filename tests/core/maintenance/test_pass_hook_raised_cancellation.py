"""A recovery-event hook whose own code raises ``CancelledError`` (nothing cancelled it) or a
foreign ``BaseException`` is a failing hook like any other: its wave is charged and retried
with backoff, the event is delivered again, and the pass (with native work running beside it)
is not cancelled or ended."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from threadline.app import Application
from threadline.maintenance.faults import RecoveryEvent
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.turn import Turn


class Foreign(BaseException):
    """Neither an ``Exception`` nor anything the host raises to stop the code."""


async def _own_cancellation() -> None:
    inner = asyncio.ensure_future(asyncio.sleep(3600))
    inner.cancel()
    await inner  # its own sub-task's cancellation escapes the hook


async def _foreign_base_exception() -> None:
    raise Foreign("not an Exception")


def _app(seen: list[str], fail: Callable[[], Awaitable[None]]) -> Application:
    app = Application()

    @app.on_recovery_event
    async def hook(event: RecoveryEvent) -> None:
        seen.append(event.kind)
        if len(seen) == 1:
            await fail()

    @app.agent("echo")
    async def echo(turn: Turn) -> dict[str, bool]:
        return {"ok": True}

    return app


async def _run(fail: Callable[[], Awaitable[None]]) -> None:
    seen: list[str] = []
    async with SimulatedObject(_app(seen, fail)) as obj:
        obj.admit("t-parked", "not-registered", {})
        served = obj.admit("t-served", "echo", {})
        await obj.run_alarms(max_passes=50)
        assert seen == ["parked", "parked"]  # failed once, then delivered again
        assert obj.submission(served.id).outcome is Outcome.COMPLETED
        assert obj.alarm_at is None


@pytest.mark.parametrize("fail", [_own_cancellation, _foreign_base_exception])
def test_a_hook_raising_what_no_one_asked_for_is_a_failed_wave(
    fail: Callable[[], Awaitable[None]],
) -> None:
    asyncio.run(_run(fail))
