"""A recovery fault whose affected work has all settled (aborted by an operator, say) is
cleared by the next pass that sees no open work in its Thread, and each of its recipients
hears ``cleared``; it does not stay listed in ``/maintenance`` forever."""

from __future__ import annotations

import asyncio

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.maintenance.faults import RecoveryEvent
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

CLAIM_SQL = "SET state = 'running'"


def _app(events: list[RecoveryEvent]) -> Application:
    app = Application(RuntimeConfig())

    @app.agent("echo")
    async def echo(turn: object) -> str:
        return "echo"

    @app.on_recovery_event
    def hear(event: RecoveryEvent) -> None:
        events.append(event)

    return app


async def _run() -> None:
    events: list[RecoveryEvent] = []
    clock = ManualClock()
    async with SimulatedObject(_app(events), clock=clock, check_alarm_invariant=True) as obj:
        refused = obj.fail_statements(CLAIM_SQL, times=10**6)
        first = obj.admit("t", "echo", {"n": 1})
        second = obj.admit("t", "echo", {"n": 2})
        await obj.run_alarms(until=clock.now_ms() + 1_000)
        (fault,) = obj.space.faults.all()
        assert fault.thread_id == "t" and fault.recipients == (first.id, second.id)
        assert [event.kind for event in events] == ["created", "created"]

        # An operator aborts everything the fault was about; the storage problem is gone too.
        refused.remaining = 0
        for submission in (first, second):
            assert obj.abort(submission.id).outcome is Outcome.ABORTED
        await obj.run_alarms(until=clock.now_ms() + 1_000)

        assert obj.space.faults.all() == []
        readout = obj.space.api.maintenance
        assert list(readout.faults()) == []
        cleared = [event for event in events if event.kind == "cleared"]
        assert [event.submission_id for event in cleared] == [first.id, second.id]
        assert all(event.fault is not None and event.fault.attempts == 1 for event in cleared)
        assert all(report.phase != "failed" for report in obj.reports)
        # Nothing is left to do: the fault's retry does not keep the alarm armed.
        await obj.run_alarms()
        assert obj.alarm_at is None
        assert len(events) == 4


def test_a_fault_with_no_open_work_left_is_cleared_and_its_recipients_hear_it() -> None:
    asyncio.run(_run())
