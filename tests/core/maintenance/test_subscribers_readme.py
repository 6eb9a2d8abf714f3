"""The "Subscribers" example of README.md runs as written: the callable subscriber gets the
contact records of every Thread, the required one consumes them before each Thread's next
submission runs, and a record it refuses parks it on that record's Thread alone."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from subscribers_support import clock, holds, log_end, row

from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState

README = Path(__file__).resolve().parents[3] / "README.md"


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Subscribers\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Subscribers section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_subscribers"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


async def _run(namespace: dict[str, Any]) -> None:
    async with SimulatedObject(namespace["app"], clock=clock(),
                               check_alarm_invariant=True) as obj:
        first = obj.admit("t1", "support", "a@example.com")
        second = obj.admit("t2", "support", "b@example.com")
        await obj.run_alarms()
        assert {obj.submission(s.id).state for s in (first, second)} == {
            SubmissionState.SETTLED}
        assert namespace["synced"] == [f"{first.id}:emit", f"{second.id}:emit"]
        # audit takes every kind: it consumed both settlement records as well.
        audit = row(obj, "audit")
        assert audit is not None and audit.cursor == log_end(obj) == 4 and not audit.parked
        assert [r["kind"] for r in obj.storage.exec("SELECT kind FROM tl_history")].count(
            "submission.settled") == 2
        # A record the audit destination refuses parks it on t3; t3's next submission
        # waits, t4's goes on.
        obj.admit("t3", "support", None)
        held = obj.admit("t3", "support", "c@example.com")
        await obj.run_alarms()
        parked = holds(obj, "audit")["t3"]
        assert parked.parked and parked.detail is not None
        assert obj.submission(held.id).state is SubmissionState.QUEUED
        assert len(namespace["synced"]) == 3
        free = [obj.admit("t4", "support", "d@example.com") for _ in range(2)]
        await obj.run_alarms()
        assert {obj.submission(s.id).state for s in free} == {SubmissionState.SETTLED}
        assert obj.submission(held.id).state is SubmissionState.QUEUED


def test_the_readme_subscribers_example_runs_as_written() -> None:
    asyncio.run(_run(_example()))
