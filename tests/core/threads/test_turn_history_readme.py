"""The "An agent's context" example of README.md runs as written: each turn of the chat reads
the earlier messages from its Thread."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from threadline import ManualClock
from threadline.testing import SimulatedObject

README = Path(__file__).resolve().parents[3] / "README.md"


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## An agent's context: `turn.history`\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_history"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


def test_the_readme_chat_counts_its_messages_from_the_thread() -> None:
    async def scenario() -> list[Any]:
        async with SimulatedObject(_example()["app"], clock=ManualClock(1_000_000)) as obj:
            ids = []
            for text in ("hi", "again", "bye"):
                ids.append(obj.admit("chat", "chat", {"text": text}).id)
                await obj.run_alarms()
            return [obj.submission(i).result for i in ids]

    assert asyncio.run(scenario()) == [{"reply": "message 1 of this chat"},
                                       {"reply": "message 2 of this chat"},
                                       {"reply": "message 3 of this chat"}]
