"""A due time more than 366 days ahead (the bound of every durable delay) is refused, and the
refusal writes nothing; 366 days exactly is accepted."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from delayed_support import START, Ran, pending, simulated

from threadline.errors import ValidationFailed
from threadline.threads.model import MAX_SLEEP_SECONDS, ScheduledSubmission

BOUND = START + MAX_SLEEP_SECONDS * 1_000


async def _refused(not_before: Any) -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        alarm = obj.alarm_at
        with pytest.raises(ValidationFailed) as refused:
            obj.admit("t", "echo", "x", not_before=not_before)
        assert refused.value.field == "not_before"
        assert pending(obj) == 0 and obj.submissions() == [] and obj.alarm_at == alarm


@pytest.mark.parametrize("not_before", [BOUND + 1, 2**53, -1, True, 1.5, "soon",
                                        datetime(2030, 1, 1)])
def test_a_due_time_beyond_366_days_or_malformed_is_refused(not_before: Any) -> None:
    asyncio.run(_refused(not_before))


async def _bound() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        sub = obj.admit("t", "echo", "x", not_before=BOUND)
        assert isinstance(sub, ScheduledSubmission) and sub.not_before == BOUND
        assert obj.alarm_at is not None and obj.alarm_at <= BOUND


def test_a_due_time_366_days_ahead_is_accepted() -> None:
    asyncio.run(_bound())
