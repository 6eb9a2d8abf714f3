"""The "Delayed submissions" example of README.md runs as written: the agent answers, then its
check-back waits two hours without holding the Thread (input arriving meanwhile runs at once),
and runs once it falls due."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from threadline import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, ScheduledSubmission, Submission

README = Path(__file__).resolve().parents[3] / "README.md"
START = 1_700_000_000_000
HOUR = 3_600_000


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Delayed submissions\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Delayed submissions section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_delayed"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


async def _run(namespace: dict[str, Any]) -> None:
    async with SimulatedObject(namespace["app"], clock=ManualClock(START),
                               check_alarm_invariant=True) as obj:
        first = obj.admit("ticket", "support", {"text": "help"})
        await obj.run_alarms(until=START + HOUR)
        answered = obj.submission(first.id)
        assert answered.result == {"status": "answered"}
        # Nothing holds the Thread: the check-back is scheduled, not queued.
        assert obj.ledger.thread_open("ticket") == []
        again = obj.admit("ticket", "support", {"text": "any news?"})
        await obj.run_alarms(until=START + HOUR + 1_000)
        assert obj.submission(again.id).outcome is Outcome.COMPLETED
        assert obj.submission(again.id).seq == 2
        await obj.run_alarms(until=START + 3 * HOUR)
        submissions = obj.submissions("ticket")
        assert [s.input for s in submissions][:3] == [
            {"text": "help"}, {"text": "any news?"}, {"check_back": True}]
        follow = submissions[2]
        assert follow.result == {"status": "still open?"}
        assert isinstance(obj.find(follow.id), Submission)
        # The second answer scheduled its own check-back, still waiting.
        waiting = obj.storage.exec("SELECT id FROM tl_delayed").rows
        assert len(waiting) == 1 and isinstance(obj.find(waiting[0]["id"]), ScheduledSubmission)


def test_the_readme_delayed_submissions_example_runs_as_written() -> None:
    asyncio.run(_run(_example()))
