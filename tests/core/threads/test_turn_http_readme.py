"""The "Calling a model" example of README.md runs as written against a fake provider."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from threadline import ManualClock
from threadline.fetching import FetchRequest
from threadline.testing import FakeAnswer, FakeFetch, SimulatedObject
from threadline.threads.history import read_history
from threadline.threads.model import Outcome

README = Path(__file__).resolve().parents[3] / "README.md"
START = 1_000_000


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Calling a model: `turn.http` and `RetryAfter`\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_http"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


def _chunk(content: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"delta": {"content": content}}]}).encode() + b"\n\n"


def test_the_readme_chat_agent_streams_a_reply_after_waiting_out_a_rate_limit() -> None:
    clock = ManualClock(START)
    asked: list[tuple[int, FetchRequest]] = []

    def provider(request: FetchRequest) -> FakeAnswer:
        asked.append((clock.now_ms(), request))
        if len(asked) == 1:
            return FakeAnswer(429, {"retry-after": "3"}, b'{"error": "rate limited"}')
        return FakeAnswer(200, {"content-type": "text/event-stream"},
                          [_chunk("Hel"), _chunk("lo"), b'data: {"choices": [{"delta": {}}]}\n\n',
                           b"data: [DONE]\n\n"])

    async def scenario() -> Any:
        app = _example()["app"]
        async with SimulatedObject(app, clock=clock, http=FakeFetch(provider),
                                   env={"OPENAI_API_KEY": "sk-local"}) as obj:
            made = obj.admit("t", "chat", {"text": "hi"}).id
            await obj.run_alarms(until=START + 60_000)
            return obj.submission(made), read_history(obj.storage, "t")

    done, records = asyncio.run(scenario())
    assert done.outcome is Outcome.COMPLETED
    assert done.result == {"reply": "Hello"}
    assert done.attempts == 1
    assert asked[1][0] - asked[0][0] == 3_000
    request = asked[1][1]
    assert request.headers["authorization"] == "Bearer sk-local"
    assert json.loads(request.body or b"")["messages"] == [{"role": "user", "content": "hi"}]
    assert [(r["kind"], json.loads(r["body_json"])) for r in records][:1] == [
        ("message", {"role": "assistant", "text": "Hello"})]
