"""A due time at or before now admits the submission at once, straight into its Thread's FIFO."""

from __future__ import annotations

import asyncio

import pytest
from delayed_support import START, Ran, pending, settled, simulated

from threadline.threads.model import Submission, SubmissionState


async def _run(offset: int) -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        sub = obj.admit("t", "echo", "past", not_before=START + offset)
        assert isinstance(sub, Submission)
        assert (sub.state, sub.seq, sub.not_before) == (SubmissionState.QUEUED, 1,
                                                        START + offset)
        assert pending(obj) == 0
        reports = await obj.run_alarms()
        assert len(reports) == 1
        assert settled(obj, sub.id).result == {"got": "past"}


@pytest.mark.parametrize("offset", [-86_400_000, -1, 0])
def test_a_due_time_in_the_past_admits_at_once(offset: int) -> None:
    asyncio.run(_run(offset))
