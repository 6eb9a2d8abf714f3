"""A recovery-event hook whose own code raises ``CancelledError`` is a failing hook like any
other: its wave is charged and retried with backoff, the event is delivered again, and the
pass (with native work running beside it) is not cancelled."""

from __future__ import annotations

import asyncio

from threadline.app import Application
from threadline.maintenance.faults import RecoveryEvent
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.turn import Turn


def _app(seen: list[str]) -> Application:
    app = Application()

    @app.on_recovery_event
    async def hook(event: RecoveryEvent) -> None:
        seen.append(event.kind)
        if len(seen) == 1:
            inner = asyncio.ensure_future(asyncio.sleep(3600))
            inner.cancel()
            await inner  # its own sub-task's cancellation escapes the hook

    @app.agent("echo")
    async def echo(turn: Turn) -> dict[str, bool]:
        return {"ok": True}

    return app


async def _run() -> None:
    seen: list[str] = []
    async with SimulatedObject(_app(seen)) as obj:
        obj.admit("t-parked", "not-registered", {})
        served = obj.admit("t-served", "echo", {})
        await obj.run_alarms(max_passes=50)
        assert seen == ["parked", "parked"]  # failed once, then delivered again
        assert obj.submission(served.id).outcome is Outcome.COMPLETED
        assert obj.alarm_at is None


def test_a_hooks_own_cancelled_error_is_a_failed_wave() -> None:
    asyncio.run(_run())
