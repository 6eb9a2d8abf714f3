"""A due time before 1970 given as a datetime is a time long past: like any past time it admits
at once, from ``turn.submit`` as from the object's own ``admit``; it never fails the Attempt.
Epoch milliseconds count from 1970: a negative count stays refused as malformed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from delayed_support import CONFIG, START, Ran, pending, settled, simulated

from threadline import Application, ManualClock, Turn
from threadline.errors import ValidationFailed
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, Submission

LONG_AGO = datetime(1969, 7, 20, 20, 17, tzinfo=UTC)


async def _turn_submit() -> None:
    app = Application(CONFIG)

    @app.agent("planner")
    async def planner(turn: Turn) -> Any:
        return await turn.submit("later", "moon", agent="echo", not_before=LONG_AGO)

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return turn.input

    clock = ManualClock(START)
    async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
        sub = obj.admit("plan", "planner", None)
        await obj.run_alarms()
        done = settled(obj, sub.id)
        assert done.outcome is Outcome.COMPLETED, done.error
        made = settled(obj, str(done.result))
        assert made.outcome is Outcome.COMPLETED and made.result == "moon"
        assert pending(obj) == 0


def test_turn_submit_with_a_datetime_before_1970_admits_at_once() -> None:
    asyncio.run(_turn_submit())


async def _admit() -> None:
    async with simulated(Ran()) as obj:
        sub = obj.admit("t", "echo", "x", not_before=LONG_AGO)
        assert isinstance(sub, Submission) and sub.seq == 1 and sub.not_before == 0
        with pytest.raises(ValidationFailed) as refused:
            obj.admit("t", "echo", "y", not_before=-1)
        assert refused.value.field == "not_before"


def test_a_datetime_before_1970_admits_at_once_and_negative_epoch_ms_is_refused() -> None:
    asyncio.run(_admit())
