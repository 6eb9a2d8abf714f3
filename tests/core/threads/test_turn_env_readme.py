"""The "Secrets and bindings" example of README.md runs as written against a test environment."""

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
    start = text.index("\n## Secrets and bindings: `turn.env`\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_env"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


def test_the_readme_env_example_reads_a_secret_and_a_var_with_its_default() -> None:
    async def scenario() -> None:
        app = _example()["app"]
        async with SimulatedObject(app, clock=ManualClock(1_000_000),
                                   env={"API_KEY": "sk-local"}) as obj:
            done = obj.admit("t", "summarise", {}).id
            await obj.run_alarms()
            sub = obj.submission(done)
            assert sub.outcome is Outcome.COMPLETED
            assert sub.result == {"model": "small", "authorised": True}

    asyncio.run(scenario())
