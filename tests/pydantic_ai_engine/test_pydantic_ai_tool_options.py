"""What a tool's options make of its call in a durable run.

A tool that raises ``ApprovalRequired`` itself suspends on ``turn.approval`` like one registered
with ``requires_approval=True``, and runs once more, approved, after the decision; a tool with
``{"threadline": False}`` runs outside any step, so again on every replay; tools handed to one
run are refused inside a durable run, at once (Pydantic AI's ``UserError`` fails the
submission without a retry).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.models.test import TestModel

from threadline import Application, ManualClock, Turn
from threadline.testing import Effects, SimulatedObject
from threadline.threads.model import Outcome, SubmissionState, WaitKind


def _app(agent: Agent[Any, Any], **options: Any) -> Application:
    from threadline.pydantic_ai import run_durably

    app = Application()

    @app.agent("a")
    async def run(turn: Turn) -> Any:
        # A tool the Attempt makes, as a turn's own code might (refused: it has no step).
        extra = options.pop("make_toolsets", None)
        if extra is not None:
            options["toolsets"] = extra()
        return str((await run_durably(turn, agent, "go", **options)).output)

    return app


def _agent(tools: FunctionToolset[Any]) -> Agent[Any, Any]:
    from threadline.pydantic_ai import ThreadlineDurability

    return Agent(TestModel(), name="opts", toolsets=[tools],
                 capabilities=[ThreadlineDurability()])


def test_a_tool_that_asks_for_approval_itself_waits_then_runs_once_approved() -> None:
    effects = Effects()
    tools: FunctionToolset[Any] = FunctionToolset(id="ask")

    @tools.tool
    def transfer(ctx: RunContext[Any], amount: int) -> str:
        effects.hit("asked" if not ctx.tool_call_approved else "transferred")
        if not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"reason": "over the limit"})
        return f"sent {amount}"

    async def scenario() -> tuple[Any, Any, Any]:
        async with SimulatedObject(_app(_agent(tools)), clock=ManualClock(1_000_000)) as obj:
            made = obj.admit("t", "a", None).id
            await obj.run_alarms()
            waiting, [wait] = obj.submission(made), obj.waits(made)
            obj.approve(made, wait.key)
            await obj.run_alarms()
            return waiting, wait, obj.submission(made)

    waiting, wait, done = asyncio.run(scenario())
    assert waiting.state is SubmissionState.SUSPENDED and wait.kind is WaitKind.APPROVAL
    assert wait.payload["tool"] == "transfer"
    assert wait.payload["metadata"] == {"reason": "over the limit"}
    assert done.outcome is Outcome.COMPLETED and "sent" in done.result
    # Asked once (its step replays on resume), run once approved.
    assert (effects.count("asked"), effects.count("transferred")) == (1, 1)


def test_a_tool_outside_any_step_runs_again_on_every_replay() -> None:
    effects = Effects()
    tools: FunctionToolset[Any] = FunctionToolset(id="free")

    @tools.tool_plain(metadata={"threadline": False})
    def note() -> str:
        effects.hit("note")
        return "noted"

    @tools.tool_plain(requires_approval=True)
    def act() -> str:
        return "acted"

    async def scenario() -> tuple[Any, list[str]]:
        async with SimulatedObject(_app(_agent(tools)), clock=ManualClock(1_000_000)) as obj:
            made = obj.admit("t", "a", None).id
            await obj.run_alarms()
            [wait] = obj.waits(made)
            obj.approve(made, wait.key)
            await obj.run_alarms()
            keys = [row["step_key"] for row in obj.storage.exec(
                "SELECT step_key FROM tl_journal WHERE submission_id = ?", made)]
            return obj.submission(made), keys

    done, keys = asyncio.run(scenario())
    assert done.outcome is Outcome.COMPLETED
    assert effects.count("note") == 2  # the first Attempt, and the replay after the approval
    assert not any("note" in key for key in keys)


def test_tools_handed_to_one_run_are_refused() -> None:
    def extra() -> list[FunctionToolset[Any]]:
        tools: FunctionToolset[Any] = FunctionToolset(id="once")

        @tools.tool_plain
        def ping() -> str:
            return "pong"

        return [tools]

    async def scenario() -> Any:
        base: FunctionToolset[Any] = FunctionToolset(id="base")
        app = _app(_agent(base), make_toolsets=extra)
        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            made = obj.admit("t", "a", None).id
            await obj.run_alarms()
            return obj.submission(made)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.FAILED and done.attempts == 1
    assert done.error["type"] == "NonRetryable"
    assert "'once' cannot be added at runtime with threadline" in done.error["message"]


@pytest.mark.parametrize("kind", ["record", "message"])
def test_the_message_kind_names_both_the_prompt_and_the_answer(kind: str) -> None:
    from threadline.pydantic_ai import ThreadlineDurability, run_durably
    from threadline.threads.history import read_history

    agent = Agent(TestModel(custom_output_text="hello"), name="k",
                  capabilities=[ThreadlineDurability(message_kind=kind)])
    app = Application()

    @app.agent("a")
    async def run(turn: Turn) -> Any:
        return str((await run_durably(turn, agent, "hi")).output)

    async def scenario() -> list[str]:
        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            obj.admit("t", "a", None)
            await obj.run_alarms()
            return [row["kind"] for row in read_history(obj.storage, "t")]

    assert asyncio.run(scenario()) == [kind, kind, "pydantic_ai.messages", "submission.settled"]
