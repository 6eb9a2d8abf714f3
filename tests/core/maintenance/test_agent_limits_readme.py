"""The "Provider limits" example of README.md runs as written: its rate holds its starts."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from threadline import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

README = Path(__file__).resolve().parents[3] / "README.md"


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Provider limits: `concurrency` and `rate`\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_limits"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


def test_the_readme_limits_example_starts_three_turns_per_ten_seconds() -> None:
    async def scenario() -> None:
        app = _example()["app"]
        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            subs = [obj.admit(f"t{n}", "summarise", {"text": f"document {n}"}).id
                    for n in range(7)]
            await obj.run_alarms()
            done = [obj.submission(sub) for sub in subs]
            assert all(sub.outcome is Outcome.COMPLETED for sub in done)
            assert done[0].result == {"summary": "document 0"}
            settled = sorted(sub.settled_at or 0 for sub in done)
            first = settled[0]
            # Three at once, three ten seconds later, the last ten seconds after that.
            assert [at - first for at in settled] == [0, 0, 0, 10_000, 10_000, 10_000, 20_000]

    asyncio.run(scenario())
