"""Crash matrix over a Pydantic AI run: lose the object at every runtime failpoint the run
passes, rebuild, recover, finish.

The run makes three model requests (two of them call a tool each, the last streams the answer)
and two tool calls. Invariants: each model request and each tool call is executed once per
submission however the object was lost, the result is the same as without a crash, the
Thread's log holds each record once, and the next submission continues the conversation from
exactly one copy of the first run's messages.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pai_support import Script, order_tools, support_agent, support_app
from pydantic_ai.messages import ModelRequest, UserPromptPart

from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.scheduling import RUNTIME_LOCATIONS
from threadline.storage import SqliteStorage
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.records import SUBMISSION_SETTLED

#: How often two submissions of the support agent pass each runtime failpoint.
PASSES = {
    "attempt:claimed": 2,
    # Three model requests and two tool calls per run, each a step.
    "step:started": 10,
    "step:finished": 10,
    # The prompt's record and the run's messages record, each outside a step.
    "emit:committed": 4,
    "followups:joined": 0,
    "settle:before": 2,
    "settle:after": 2,
}
CASES = [(location, n) for location in RUNTIME_LOCATIONS for n in range(PASSES[location])]
EFFECTS = ("model:1", "model:2", "model:3", "lookup_order", "refund_order")
ANSWERS = {"order A1": "Order A1 shipped and A1 refunded.",
           "order B2": "Order B2 shipped and B2 refunded."}


def harness(storage: SqliteStorage, clock: ManualClock, effects: Effects,
            script: Script) -> ThreadHarness:
    return ThreadHarness(storage, clock, lambda: support_app(
        lambda: support_agent(script, order_tools(effects))))


def test_the_matrix_covers_every_runtime_failpoint() -> None:
    assert set(PASSES) == set(RUNTIME_LOCATIONS)


def test_the_run_passes_each_failpoint_as_often_as_declared(
    storage: SqliteStorage, clock: ManualClock,
) -> None:
    effects = Effects()
    h = harness(storage, clock, effects, Script(effects))
    first = h.admit("t", {"text": "order A1"}, agent="support")
    second = h.admit("t", {"text": "order B2"}, agent="support")
    asyncio.run(h.drive())
    assert {location: h.failpoints.hits(location) for location in PASSES} == PASSES
    assert h.get(first.id).result == {"text": ANSWERS["order A1"]}
    assert h.get(second.id).result == {"text": ANSWERS["order B2"]}


@pytest.mark.parametrize(("location", "after"), CASES)
def test_crash_evict_recover(
    storage: SqliteStorage, clock: ManualClock, effects: Effects,
    settlements: SettlementLog, location: str, after: int,
) -> None:
    script = Script(effects)
    h = harness(storage, clock, effects, script)
    subs = [h.admit("t", {"text": text}, agent="support") for text in ANSWERS]
    h.failpoints.evict_at(location, after=after)
    with pytest.raises(Evicted):
        asyncio.run(h.drive())

    h.evict()
    clock.advance(h.app.config.lease_ms)
    asyncio.run(h.drive())

    for sub, text in zip(subs, ANSWERS, strict=True):
        done = h.get(sub.id)
        assert done.state is SubmissionState.SETTLED and done.outcome is Outcome.COMPLETED
        assert done.result == {"text": ANSWERS[text]}
        assert settlements.count(sub.id) == 1 and h.settled_records(sub.id) == 1
    # Each model request and tool call ran once per submission, crash or not.
    assert {name: effects.count(name) for name in EFFECTS} == dict.fromkeys(EFFECTS, 2)
    history = storage.exec("SELECT submission_id, kind, body_json FROM tl_history ORDER BY seq")
    rows = [(row["submission_id"], row["kind"], json.loads(row["body_json"])) for row in history]
    for sub, text in zip(subs, ANSWERS, strict=True):
        mine = [(kind, body) for owner, kind, body in rows if owner == sub.id]
        assert [kind for kind, _ in mine] == [
            "message", "message", "pydantic_ai.messages", SUBMISSION_SETTLED]
        assert mine[0][1] == {"role": "user", "text": text}
        assert (mine[1][1]["role"], mine[1][1]["text"]) == ("assistant", ANSWERS[text])
    # The second run's first request carries the first run's messages once, then its prompt.
    second_first = next(seen for seen in script.seen if _prompts(seen) == ["order A1",
                                                                           "order B2"])
    assert len(second_first) == 7  # 3 requests and 3 responses of the first run, 1 prompt


def _prompts(messages: list[Any]) -> list[str]:
    return [str(part.content) for message in messages if isinstance(message, ModelRequest)
            for part in message.parts if isinstance(part, UserPromptPart)]
