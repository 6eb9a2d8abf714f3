"""A scheduled submission can be aborted: it settles ``aborted`` at once, with its reason, under
its own id, and never runs; nothing is left half-written."""

from __future__ import annotations

import asyncio

from delayed_support import MINUTE, START, Ran, pending, settled, simulated

from threadline.testing import SettlementLog
from threadline.threads.model import AbortState, Outcome


async def _run(settlements: SettlementLog) -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        due = START + 10 * MINUTE
        doomed = obj.admit("t", "echo", "doomed", not_before=due)
        kept = obj.admit("t", "echo", "kept", not_before=due)
        aborted = obj.abort(doomed.id, "no longer needed")
        assert aborted.id == doomed.id and aborted.outcome is Outcome.ABORTED
        assert aborted.error == {"type": "Aborted", "message": "no longer needed"}
        intent = obj.ledger.read_abort_intent(doomed.id)
        assert intent is not None and intent.state is AbortState.APPLIED
        assert pending(obj) == 1
        # Aborting again changes nothing.
        assert obj.abort(doomed.id, "again") == aborted
        await obj.run_alarms()
        assert ran.inputs() == ["kept"]
        assert settled(obj, doomed.id).outcome is Outcome.ABORTED
        assert settled(obj, kept.id).outcome is Outcome.COMPLETED
        assert pending(obj) == 0 and obj.alarm_at is None
        assert settlements.count(doomed.id) == 1 and settlements.count(kept.id) == 1


def test_a_scheduled_submission_is_aborted_at_once_and_never_runs(
    settlements: SettlementLog,
) -> None:
    asyncio.run(_run(settlements))
