"""A delayed submission holds no place in its Thread's FIFO until it falls due: input that
arrives meanwhile runs at once."""

from __future__ import annotations

import asyncio

from delayed_support import MINUTE, START, Ran, admitted, settled, simulated

from threadline.threads.model import ScheduledSubmission


async def _run() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        later = obj.admit("t", "echo", "later", not_before=START + 10 * MINUTE)
        assert isinstance(later, ScheduledSubmission)
        assert (later.state, later.seq, later.not_before) == ("scheduled", None,
                                                              START + 10 * MINUTE)
        now = obj.admit("t", "echo", "now")
        await obj.run_alarms(until=START + MINUTE)
        assert settled(obj, now.id).seq == 1
        assert ran.inputs() == ["now"]
        assert ran.at("now") < START + MINUTE
        assert isinstance(obj.find(later.id), ScheduledSubmission)
        await obj.run_alarms()
        assert ran.inputs() == ["now", "later"]
        assert admitted(obj, later.id).seq == 2


def test_input_arriving_before_a_delayed_submission_falls_due_runs_at_once() -> None:
    asyncio.run(_run())
