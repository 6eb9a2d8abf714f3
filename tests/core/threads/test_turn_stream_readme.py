"""The "Streaming an answer" example of README.md runs as written."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from threadline import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.history import read_history
from threadline.threads.model import Outcome

README = Path(__file__).resolve().parents[3] / "README.md"


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Streaming an answer: `turn.stream`\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_stream"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


def test_the_readme_stream_example_stores_one_record_with_the_whole_text() -> None:
    async def scenario() -> Any:
        async with SimulatedObject(_example()["app"], clock=ManualClock(1_000_000)) as obj:
            made = obj.admit("t", "narrate", {"text": "once upon a time"}).id
            await obj.run_alarms()
            return obj.submission(made), read_history(obj.storage, "t")

    done, rows = asyncio.run(scenario())
    assert done.outcome is Outcome.COMPLETED
    assert done.result == {"told": "once upon a time "}
    [message] = [row for row in rows if row["kind"] == "message"]
    body = json.loads(message["body_json"])
    assert (body["text"], body["role"]) == ("once upon a time ", "assistant")
    assert body["stream"].startswith(done.id)
