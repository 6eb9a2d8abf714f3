"""A fault lifted by the last recovery of a pass that then ran out of time is not left behind.

The recovery of a faulted Thread succeeds (its fault is lifted, to be cleared once nothing is
left to dispatch), its head is suspended on an approval, and the pass's event deadline passes
during that recovery. The pass stops there; the fault must still be cleared by it (recipients
hear ``cleared``, ``/maintenance`` stops listing it), never left recorded with its retry in the
past while the generation is acknowledged and no alarm is set.
"""

from __future__ import annotations

import asyncio
from typing import Any

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.maintenance.faults import RecoveryEvent
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState
from threadline.threads.recovery import RecoverySweepResult

CONFIG = RuntimeConfig()


def _app(events: list[RecoveryEvent]) -> Application:
    app = Application(CONFIG)

    @app.agent("ask")
    async def ask(turn: Any) -> Any:
        decision = await turn.approval("go")
        return {"approved": decision.approved}

    @app.on_recovery_event
    def hear(event: RecoveryEvent) -> None:
        events.append(event)

    return app


async def _run() -> None:
    events: list[RecoveryEvent] = []
    clock = ManualClock()
    async with SimulatedObject(_app(events), clock=clock, check_alarm_invariant=True) as obj:
        head = obj.admit("t", "ask", {})
        await obj.run_alarms()
        assert obj.submission(head.id).state is SubmissionState.SUSPENDED
        assert obj.alarm_at is None

        # An earlier recovery of the Thread was blocked: its fault is due for a retry.
        fault = obj.space.faults.record("t", failure="disk I/O error", error_type="StorageError",
                                        recipients=[head.id])
        runtime = obj.space.runtime
        original = runtime.run_recovery

        def slow(thread_id: str) -> RecoverySweepResult:
            # The recovery succeeds, but only once the pass's event deadline has passed.
            clock.advance(CONFIG.event_deadline_ms)
            return original(thread_id)

        runtime.run_recovery = slow  # type: ignore[method-assign]
        await obj.run_alarms(until=fault.retry_at)
        runtime.run_recovery = original  # type: ignore[method-assign]
        assert obj.reports[-1].phase == "actionable"
        assert obj.clock.now_ms() >= obj.reports[-1].started_at + CONFIG.event_deadline_ms

        # Either the pass cleared the fault, or it left something due that will: never a
        # fault recorded with its retry in the past and nothing armed to act on it.
        await obj.run_alarms()
        assert obj.space.faults.all() == []
        assert list(obj.space.api.maintenance.faults()) == []
        assert [event.kind for event in events] == ["created", "cleared"]
        assert obj.submission(head.id).state is SubmissionState.SUSPENDED
        assert obj.alarm_at is None


def test_a_fault_lifted_as_the_pass_runs_out_of_time_is_cleared() -> None:
    asyncio.run(_run())
