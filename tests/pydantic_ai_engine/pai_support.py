"""A support agent written with Pydantic AI, scripted with its own ``FunctionModel``.

Each run asks the model three times: the first answer calls ``lookup_order``, the second
``refund_order`` (both with the order from the prompt), the third streams a text made of what
the two tools returned. Every model request, tool call and streamed delta is counted in an
:class:`~threadline.testing.Effects` log that outlives the object, so a test can say how often
each really happened across crashes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic_ai import Agent, FunctionToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from threadline import Application, Turn
from threadline.pydantic_ai import ThreadlineDurability, run_durably
from threadline.testing import Effects

#: The text pieces the third answer streams, before the tools' results are filled in.
ANSWER = ("Order ", "{lookup}", " and ", "{refund}", ".")


def this_run(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The messages from the last user prompt on: what the current run added."""
    for at in range(len(messages) - 1, -1, -1):
        message = messages[at]
        if isinstance(message, ModelRequest) and any(
                isinstance(part, UserPromptPart) for part in message.parts):
            return messages[at:]
    return messages


def returns(messages: list[ModelMessage]) -> dict[str, Any]:
    """The tool results of the current run, by tool name."""
    return {part.tool_name: part.content for message in this_run(messages)
            if isinstance(message, ModelRequest) for part in message.parts
            if isinstance(part, ToolReturnPart)}


def prompt_of(messages: list[ModelMessage]) -> str:
    [first, *_] = this_run(messages)
    assert isinstance(first, ModelRequest)
    return next(str(part.content) for part in first.parts if isinstance(part, UserPromptPart))


class Script:
    """The model's side of the conversation; ``seen`` keeps every request's messages."""

    def __init__(self, effects: Effects, *, tools: tuple[str, ...] = ("lookup_order",
                                                                      "refund_order")) -> None:
        self.effects = effects
        self.tools = tools
        self.seen: list[list[ModelMessage]] = []

    def _next_call(self, messages: list[ModelMessage]) -> tuple[int, str | None]:
        done = returns(messages)
        answered = sum(isinstance(m, ModelResponse) for m in this_run(messages))
        pending = [tool for tool in self.tools if tool not in done]
        return answered + 1, (pending[0] if pending else None)

    def text(self, messages: list[ModelMessage]) -> list[str]:
        done = returns(messages)
        return [piece.format(lookup=done.get("lookup_order"), refund=done.get("refund_order"))
                for piece in ANSWER]

    async def stream(self, messages: list[ModelMessage],
                     info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        number, tool = self._next_call(messages)
        self.seen.append(list(messages))
        self.effects.hit(f"model:{number}")
        if tool is not None:
            args = json.dumps({"order": prompt_of(messages).split()[-1]})
            yield {0: DeltaToolCall(name=tool, json_args=args, tool_call_id=f"call-{number}")}
            return
        for piece in self.text(messages):
            self.effects.hit("delta")
            yield piece

    def whole(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        number, tool = self._next_call(messages)
        self.seen.append(list(messages))
        self.effects.hit(f"model:{number}")
        if tool is not None:
            return ModelResponse(parts=[ToolCallPart(
                tool, {"order": prompt_of(messages).split()[-1]}, tool_call_id=f"call-{number}")])
        return ModelResponse(parts=[TextPart("".join(self.text(messages)))])

    def model(self) -> FunctionModel:
        return FunctionModel(self.whole, stream_function=self.stream, model_name="script")


def order_tools(effects: Effects, *, refund: dict[str, Any] | None = None,
                after_refund: Callable[[], None] | None = None) -> FunctionToolset[Any]:
    """``lookup_order`` and ``refund_order``, counted in ``effects``; ``refund`` is the refund
    tool's ``threadline`` metadata (its step's configuration), ``after_refund`` called once
    the refund's effect happened (to lose the object right there)."""
    tools: FunctionToolset[Any] = FunctionToolset(id="orders")

    @tools.tool_plain
    def lookup_order(order: str) -> str:
        """Where an order is."""
        effects.hit("lookup_order")
        return f"{order} shipped"

    metadata = {"threadline": refund} if refund is not None else None

    @tools.tool_plain(metadata=metadata)
    def refund_order(order: str) -> str:
        """Refund an order (a side effect)."""
        effects.hit("refund_order")
        if after_refund is not None:
            after_refund()
        return f"{order} refunded"

    return tools


def support_agent(
    script: Script, tools: FunctionToolset[Any], **durability: Any
) -> Agent[Any, str]:
    return Agent(script.model(), name="support", toolsets=[tools],
                 capabilities=[ThreadlineDurability(**durability)])


def support_app(make_agent: Callable[[], Agent[Any, Any]]) -> Application:
    """An application whose ``support`` agent runs a fresh Pydantic AI agent per incarnation."""
    app = Application()
    agent = make_agent()

    @app.agent("support")
    async def support(turn: Turn) -> dict[str, Any]:
        result = await run_durably(turn, agent, turn.input["text"])
        return {"text": result.output}

    return app
