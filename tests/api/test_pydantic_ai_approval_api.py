"""A Pydantic AI tool that needs approval suspends its run on ``turn.approval``; a decision
over the HTTP API resumes it.

The model asks for ``refund_order``, registered with ``requires_approval=True``: the submission
suspends with the call as the approval's payload, the tool has not run, and nothing of the
model's is asked twice. Approved, the tool runs once and the model answers with its result;
declined, the tool never runs and the model is told the decision's text.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from api_support import Api, make_api
from pydantic_ai import Agent, FunctionToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from threadline import Application, ManualClock, Turn
from threadline.pydantic_ai import DECLINED, ThreadlineDurability, run_durably


class Refunds:
    """The model and the tool, each call counted."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results = [part for message in messages if isinstance(message, ModelRequest)
                   for part in message.parts if part.part_kind == "tool-return"]
        self.calls[f"model:{len(results)}"] += 1
        if not results:
            return ModelResponse(parts=[ToolCallPart("refund_order", {"order": "A1"},
                                                     tool_call_id="call-1")])
        return ModelResponse(parts=[TextPart(f"refund: {results[0].content}")])

    def extend(self, app: Application) -> None:
        tools: FunctionToolset[Any] = FunctionToolset(id="orders")

        @tools.tool_plain(requires_approval=True)
        def refund_order(order: str) -> str:
            """Refund an order."""
            self.calls["refund_order"] += 1
            return f"{order} refunded"

        agent = Agent(FunctionModel(self.model), name="support", toolsets=[tools],
                      capabilities=[ThreadlineDurability(stream=False)])

        @app.agent("support")
        async def support(turn: Turn) -> dict[str, Any]:
            result = await run_durably(turn, agent, turn.input["text"])
            return {"text": result.output}


def _suspended(api: Api) -> tuple[str, dict[str, Any]]:
    made = api.submit("t", {"text": "refund A1"}, agent="support").json()["id"]
    api.drive()
    return made, api.call("GET", api.submission_path("t", made)).json()


def test_the_run_waits_for_the_approval_then_runs_the_tool_once(clock: ManualClock) -> None:
    refunds = Refunds()
    api = make_api(clock, refunds.extend)
    made, waiting = _suspended(api)
    assert waiting["state"] == "suspended"
    [wait] = waiting["waits"]
    assert (wait["kind"], wait["key"]) == ("approval", "call-1")
    assert wait["payload"] == {"tool": "refund_order", "args": {"order": "A1"},
                               "tool_call_id": "call-1"}
    assert refunds.calls == {"model:0": 1}
    api.drive()  # nothing moves while it waits
    assert refunds.calls == {"model:0": 1}

    decided = api.call("POST", api.submission_path("t", made) + "/approvals/call-1",
                       {"approved": True})
    assert decided.status == 200, decided.json()
    api.drive()
    done = api.call("GET", api.submission_path("t", made)).json()
    assert (done["outcome"], done["result"]) == ("completed", {"text": "refund: A1 refunded"})
    assert refunds.calls == {"model:0": 1, "refund_order": 1, "model:1": 1}
    assert done["attempts"] == 1


def test_a_declined_call_never_runs_and_the_model_hears_why(clock: ManualClock) -> None:
    refunds = Refunds()
    api = make_api(clock, refunds.extend)
    made, _ = _suspended(api)
    api.call("POST", api.submission_path("t", made) + "/approvals/call-1",
             {"approved": False, "payload": "refunds need a manager"})
    api.drive()
    done = api.call("GET", api.submission_path("t", made)).json()
    assert done["result"] == {"text": "refund: refunds need a manager"}
    assert refunds.calls["refund_order"] == 0


def test_a_decline_without_text_says_the_call_was_declined(clock: ManualClock) -> None:
    refunds = Refunds()
    api = make_api(clock, refunds.extend)
    made, _ = _suspended(api)
    api.call("POST", api.submission_path("t", made) + "/approvals/call-1", {"approved": False})
    api.drive()
    done = api.call("GET", api.submission_path("t", made)).json()
    assert done["result"] == {"text": f"refund: {DECLINED}"}
    assert refunds.calls["refund_order"] == 0
