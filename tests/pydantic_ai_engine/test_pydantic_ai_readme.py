"""The "Pydantic AI" example of README.md runs as written, against the test kit's fake provider.

Its read-only tool runs as a step and the answer streams into one record; its refund waits for
an approval, then runs once; a chat turn like it writes the rows the README says.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from pai_support import Script, order_tools, support_agent, support_app

from threadline import ManualClock
from threadline.testing import Effects, FakeFetch, FakeProvider, SimulatedObject
from threadline.threads.history import read_history
from threadline.threads.model import Outcome, SubmissionState

README = Path(__file__).resolve().parents[2] / "README.md"
ENV = {"OPENAI_API_KEY": "sk-test"}


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Pydantic AI\n")
    return text[start:text.index("\n## ", start + 1)]


def _example() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", _section(), flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_pydantic_ai"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


def _turn(provider: FakeProvider, *, approve: bool = False) -> tuple[Any, Any, list[Any], Any]:
    clock = ManualClock(1_000_000)
    fetch = FakeFetch(provider.handler(clock))

    async def scenario() -> tuple[Any, Any, list[Any]]:
        async with SimulatedObject(_example()["app"], clock=clock, http=fetch,
                                   env=ENV) as obj:
            made = obj.admit("t", "support", {"text": "where is A1"}).id
            await obj.run_alarms()
            waiting = obj.submission(made), obj.waits(made)
            if approve:
                obj.approve(made, waiting[1][0].key)
                await obj.run_alarms()
            rows = read_history(obj.storage, "t")
            return waiting, obj.submission(made), [(r["kind"], json.loads(r["body_json"]))
                                                   for r in rows]

    waiting, done, records = asyncio.run(scenario())
    return waiting, done, records, fetch


def test_the_read_only_tool_runs_and_the_answer_is_one_record() -> None:
    provider = FakeProvider(tokens=3, tool="lookup_order")
    _, done, records, fetch = _turn(provider)
    assert done.outcome is Outcome.COMPLETED and done.result == {"text": "where is A1"}
    assert fetch.requests[0].url == "https://api.openai.com/v1/chat/completions"
    assert fetch.requests[0].headers["authorization"] == "Bearer sk-test"
    [returned] = [m for m in provider.requests[1]["messages"] if m["role"] == "tool"]
    assert returned["content"] == "order where is A1: shipped"
    assert [(kind, body.get("role")) for kind, body in records] == [
        ("message", "user"), ("message", "assistant"), ("pydantic_ai.messages", None),
        ("submission.settled", None)]


def test_the_refund_waits_for_an_approval_then_runs_once() -> None:
    provider = FakeProvider(tokens=3, tool="refund_order")
    (waiting, waits), done, _, fetch = _turn(provider, approve=True)
    assert waiting.state is SubmissionState.SUSPENDED
    [wait] = waits
    assert (wait.key, wait.payload["tool"]) == ("call_1", "refund_order")
    assert done.outcome is Outcome.COMPLETED
    assert len(fetch.requests) == 2  # the call, then the answer: nothing asked twice
    [returned] = [m for m in provider.requests[1]["messages"] if m["role"] == "tool"]
    assert returned["content"] == "order where is A1: refunded"


def test_a_turn_with_two_tool_calls_and_a_streamed_answer_writes_the_rows_it_says() -> None:
    said = re.search(r"a streamed answer\) writes (\d+) rows\s+\((\d+) journal entries, "
                     r"(\d+) log records", _section())
    assert said is not None
    rows, journal, records = (int(n) for n in said.groups())
    effects = Effects()
    app = support_app(lambda: support_agent(Script(effects), order_tools(effects)))

    async def scenario() -> tuple[int, int, int]:
        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            await obj.start()
            before = obj.storage.meter.reading()
            made = obj.admit("t", "support", {"text": "order A1"}).id
            await obj.run_alarms()
            written = (obj.storage.meter.reading() - before).rows_written
            count = "SELECT COUNT(*) AS n FROM {} WHERE submission_id = ?"
            return (written, obj.storage.exec(count.format("tl_journal"), made).one()["n"],
                    obj.storage.exec(count.format("tl_history"), made).one()["n"])

    assert asyncio.run(scenario()) == (rows, journal, records)
