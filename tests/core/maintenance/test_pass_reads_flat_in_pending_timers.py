"""The pass that serves one due timer reads the same rows however many timers are pending."""

from __future__ import annotations

import asyncio

from threadline import Application
from threadline.maintenance import PassPhase
from threadline.testing import SimulatedObject
from threadline.threads import Turn
from threadline.threads.model import SubmissionState

FAR_S = 86_400.0
NEAR_S = 1.0

app = Application()


@app.agent("sleeper")
async def sleeper(turn: Turn) -> object:
    assert isinstance(turn.input, dict)
    await turn.sleep(float(turn.input["s"]))
    return {"slept": turn.input["s"]}


async def _serving_cost(pending: int) -> tuple[int, int, int]:
    """Rows read, rows written and passes of the alarms that serve one due timer."""
    async with SimulatedObject(app) as obj:

        def admit() -> None:
            for i in range(pending):
                obj.admit(f"far-{i:05d}", "sleeper", {"s": FAR_S})

        obj.storage.transaction(admit)
        await obj.run_alarms(until=obj.clock.now_ms() + 1_000, max_passes=100_000)
        sub = obj.admit("near", "sleeper", {"s": NEAR_S})
        await obj.run_alarms(until=obj.clock.now_ms() + 500)
        assert obj.submission(sub.id).state is SubmissionState.SUSPENDED
        due = obj.alarm_at
        assert due is not None and due <= obj.clock.now_ms() + 1_000
        reports = await obj.run_alarms(until=due)
        assert obj.submission(sub.id).state is SubmissionState.SETTLED
        assert reports and all(r.phase is PassPhase.ACTIONABLE for r in reports)
        sleeping = [s for s in obj.submissions() if s.state is SubmissionState.SUSPENDED]
        assert len(sleeping) == pending
        # The far timers are still the next thing owed: the alarm is armed for them.
        assert obj.alarm_at is not None and obj.alarm_at > due + 3_600_000
        return (sum(r.rows_read for r in reports), sum(r.rows_written for r in reports),
                len(reports))


def test_serving_a_due_timer_reads_the_same_rows_for_10_and_1000_pending() -> None:
    few = asyncio.run(_serving_cost(10))
    many = asyncio.run(_serving_cost(1_000))
    assert few == many
