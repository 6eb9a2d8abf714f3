"""The steps a Pydantic AI run journals, pinned: their names are the journal's keys.

A submission in flight when a new version deploys replays by these names; a rename would make
the new version miss every finished step and call the model and the tools again. So a change
here is a migration of in-flight work, never a side effect of a refactoring: Pydantic AI's
journal naming convention (``<agent>__model.request_stream``,
``<agent>__function_toolset__<id>.call_tool:<tool>``), a model's registry key as a suffix, and a
name a step cannot hold as it is made into one with a digest of it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pai_support import Script, order_tools, support_agent
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from threadline import Application, ManualClock, Turn
from threadline.pydantic_ai import ThreadlineDurability, approval_key, run_durably, step_name
from threadline.testing import Effects, SimulatedObject

SUPPORT = [
    "history",
    "step:support__model.request_stream",
    "step:support__function_toolset__orders.call_tool:lookup_order",
    "step:support__model.request_stream#2",
    "step:support__function_toolset__orders.call_tool:refund_order",
    "step:support__model.request_stream#3",
]


def _journal(agent: Agent[Any, Any], **options: Any) -> list[str]:
    app = Application()

    @app.agent("a")
    async def run(turn: Turn) -> str:
        return str((await run_durably(turn, agent, "order A1", **options)).output)

    async def scenario() -> list[str]:
        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            made = obj.admit("t", "a", None).id
            await obj.run_alarms()
            assert obj.submission(made).error is None
            return [row["step_key"] for row in obj.storage.exec(
                "SELECT step_key FROM tl_journal WHERE submission_id = ? ORDER BY position",
                made)]

    return asyncio.run(scenario())


def test_a_streamed_run_journals_these_steps() -> None:
    effects = Effects()
    assert _journal(support_agent(Script(effects), order_tools(effects))) == SUPPORT


def test_a_run_of_whole_answers_journals_these_steps() -> None:
    effects = Effects()
    agent = support_agent(Script(effects), order_tools(effects), stream=False)
    assert _journal(agent) == [key.replace("request_stream", "request") for key in SUPPORT]


def test_the_agents_own_tools_and_a_registered_model_are_named_so() -> None:
    agent = Agent(TestModel(), name="own",
                  capabilities=[ThreadlineDurability(models={"backup": TestModel()})])

    @agent.tool_plain
    def ping(x: int) -> int:
        return x

    tool = "step:own__function_toolset__-agent-.call_tool:ping.824450b0561f7ba4"
    assert _journal(agent) == ["history", "step:own__model.request_stream", tool,
                               "step:own__model.request_stream#2"]
    assert _journal(agent, model="backup") == [
        "history", "step:own__model.request_stream.backup", tool,
        "step:own__model.request_stream.backup#2"]


@pytest.mark.parametrize(("operation", "step"), [
    ("a__model.request", "a__model.request"),
    ("a__function_toolset__<agent>.call_tool:ping",
     "a__function_toolset__-agent-.call_tool:ping.f8b1ed8b9c06e1cb"),
    ("a__model.request.openrouter/anthropic claude",
     "a__model.request.openrouter-anthropic-claude.f47e727f3e681121"),
    ("x" * 129, "x" * 100 + ".0ec9eb33e74510bc"),
])
def test_a_name_a_step_cannot_hold_becomes_one_with_its_digest(operation: str,
                                                               step: str) -> None:
    assert step_name(operation) == step


def test_an_approval_key_is_the_tool_call_id_or_its_digest() -> None:
    assert approval_key("call_abc-1") == "call_abc-1"
    assert approval_key("toolu/01 é") == "call-0f7c2548bf471dfe711a0c611f410361"
    assert len(approval_key("x" * 200)) == len("call-") + 32
