"""A binding wait belongs to the submission that was parked, not to its Thread: when that
head settles (aborted by an operator), the next head is judged on its own. If its agent is
not registered either, it is parked and reported in turn; it never sits dormant unreported."""

from __future__ import annotations

import asyncio

from threadline.app import Application
from threadline.maintenance.faults import RecoveryEvent
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState
from threadline.threads.turn import Turn


def _app(events: list[tuple[str, str | None]]) -> Application:
    app = Application()

    @app.on_recovery_event
    async def hook(event: RecoveryEvent) -> None:
        events.append((event.kind, event.submission_id))

    @app.agent("echo")
    async def echo(turn: Turn) -> str:
        return "echo"

    return app


async def _run() -> None:
    events: list[tuple[str, str | None]] = []
    async with SimulatedObject(_app(events)) as obj:
        first = obj.admit("t", "translator", {"n": 1})
        second = obj.admit("t", "translator", {"n": 2})
        await obj.run_alarms()
        assert events == [("parked", first.id)]

        obj.abort(first.id, "not needed")
        await obj.run_alarms()
        assert obj.submission(first.id).state is SubmissionState.SETTLED
        assert obj.submission(second.id).state is SubmissionState.QUEUED
        waits = [(thread, sid) for thread, sid, _, _ in obj.space.bindings.waits()]
        assert waits == [("t", second.id)]
        assert events == [("parked", first.id), ("parked", second.id)]
        assert obj.alarm_at is None  # parked again: dormant


def test_the_next_unregistered_head_is_parked_and_reported_in_turn() -> None:
    asyncio.run(_run())
