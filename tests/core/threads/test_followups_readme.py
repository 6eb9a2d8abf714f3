"""The "Follow-up input" example of README.md runs as written: a user adds a message while
the model is still answering; the agent takes it into its answer, and the added message
settles with that answer instead of getting one of its own. A crash after the follow-up was
taken changes nothing: the replay sees the same follow-up."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from threadline import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, SubmissionState

README = Path(__file__).resolve().parents[3] / "README.md"
START = 1_700_000_000_000


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Follow-up input\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Follow-up input section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_followups"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


async def _run(namespace: dict[str, Any], crash: str | None) -> None:
    model = namespace["model"]
    calls: list[list[str]] = []
    added: list[str] = []

    def answering(messages: list[str]) -> str:
        calls.append(list(messages))
        if not added:
            # The user types while the model is still answering the first message.
            added.append(obj.admit("chat-1", "chat", {"text": "in French please"}).id)
        return str(model(messages))

    namespace["model"] = answering
    async with SimulatedObject(namespace["app"], clock=ManualClock(START),
                               check_alarm_invariant=True) as obj:
        crashed = None if crash is None else obj.crash_at(crash)
        first = obj.admit("chat-1", "chat", {"text": "what is a durable object?"})
        await obj.run_alarms()

        reply = "answer to: what is a durable object? / in French please"
        result = {"reply": reply, "messages": 2}
        answered = obj.submission(first.id)
        assert (answered.outcome, answered.result) == (Outcome.COMPLETED, result)
        follow = obj.submission(added[0])
        assert (follow.state, follow.outcome, follow.result, follow.joined_to) == (
            SubmissionState.SETTLED, Outcome.COMPLETED, result, first.id)
        # One answer in the history, and the added message got no answer of its own: after
        # the answer, one settlement record each, the added message's naming its head.
        logged = [(row["kind"], json.loads(row["body_json"])) for row in obj.storage.exec(
            "SELECT kind, body_json FROM tl_history WHERE thread_id = 'chat-1' ORDER BY seq")]
        assert logged[0] == ("record", {"role": "assistant", "text": reply})
        assert sorted(logged[1:], key=lambda item: item[1]["submission_id"] != first.id) == [
            ("submission.settled",
             {"submission_id": first.id, "outcome": "completed", "result": result}),
            ("submission.settled", {"submission_id": added[0], "outcome": "completed",
                                    "result": result, "joined_to": first.id}),
        ]
        # The model saw the first message alone, then both; never the second alone.
        assert calls[0] == ["what is a durable object?"]
        assert calls[-1] == ["what is a durable object?", "in French please"]
        assert ["in French please"] not in calls
        assert crashed is None or crashed.fired


def test_the_readme_followups_example_runs_as_written() -> None:
    asyncio.run(_run(_example(), crash=None))


@pytest.mark.parametrize("crash", ["followups:joined", "emit:committed", "settle:before"])
def test_the_readme_followups_example_survives_a_crash(crash: str) -> None:
    asyncio.run(_run(_example(), crash=crash))
