"""The "Host lanes" example of README.md runs as written: the agent wakes the after-native lane,
which runs once the Attempt joined and is due again an hour later."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from host_lanes_support import clock, lane

from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

README = Path(__file__).resolve().parents[3] / "README.md"
HOUR = 3_600_000


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Host lanes\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Host lanes section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_host_lanes"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


async def _run(namespace: dict[str, Any]) -> None:
    async with SimulatedObject(namespace["app"], clock=clock(),
                               check_alarm_invariant=True) as obj:
        sub = obj.admit("t", "support", None)
        fired = obj.alarm_at
        assert fired is not None
        await obj.run_alarms(until=fired)
        assert obj.submission(sub.id).outcome is Outcome.COMPLETED
        row = lane(obj, "digest")
        assert row is not None and row.stalls == 0
        assert row.due_at == obj.reports[-1].started_at + HOUR
        assert obj.alarm_at == row.due_at


def test_the_readme_host_lanes_example_runs_as_written() -> None:
    asyncio.run(_run(_example()))
