"""The alarm that admits one due delayed submission reads (and writes) the same rows with 10 or
10,000 others pending: its reads are seeks in the due index, never a scan of what waits."""

from __future__ import annotations

import asyncio

from delayed_support import MINUTE, START, Ran, admitted, pending, simulated

from threadline.maintenance import PassReport
from threadline.threads.model import ScheduledSubmission

FAR = START + 24 * 60 * MINUTE


async def _admitting_pass(others: int) -> PassReport:
    ran = Ran()
    async with simulated(ran) as obj:

        def schedule() -> None:
            for n in range(others):
                obj.admit(f"far-{n:05d}", "echo", n, not_before=FAR)

        obj.storage.transaction(schedule)
        await obj.run_alarms(until=START + 1_000)  # a new object's first pass
        near = obj.admit("near", "echo", "near", not_before=START + MINUTE)
        assert isinstance(near, ScheduledSubmission)
        reports = await obj.run_alarms(until=START + MINUTE)
        assert len(reports) == 1  # the alarm that admits it
        admitted(obj, near.id)
        assert pending(obj) == others
        # The rest waits: the alarm is armed for the next one due, the far ones.
        await obj.run_alarms(until=FAR - 1)
        assert ran.inputs() == ["near"] and obj.alarm_at == FAR
        return reports[0]


def test_admitting_a_due_delayed_submission_reads_the_same_rows_for_10_and_10000_pending() -> None:
    few = asyncio.run(_admitting_pass(10))
    many = asyncio.run(_admitting_pass(10_000))
    assert (few.rows_read, few.rows_written) == (many.rows_read, many.rows_written)
    assert few.rows_read <= 15
