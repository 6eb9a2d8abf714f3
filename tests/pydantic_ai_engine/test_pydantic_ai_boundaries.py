"""What the Pydantic AI adapter decides at its edges: how a step's error is read, what a tool's
step configuration may say, bad set-ups refused at once, signals let through, sync tools run
inline, a run outside ``run_durably`` left alone, and a run's messages kept within the bound.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from pai_support import Script, order_tools, support_agent, support_app
from pydantic_ai import Agent, FunctionToolset
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.test import TestModel

from threadline import Application, ManualClock, RetryPolicy, RuntimeConfig, Turn
from threadline.errors import (
    Evicted,
    HttpClientError,
    HttpTimeout,
    RetryAfter,
    ValidationFailed,
)
from threadline.pydantic_ai import ThreadlineDurability, run_durably
from threadline.pydantic_ai.durable_run import InlineExecutor
from threadline.pydantic_ai.step_backend import (
    StepSettings,
    step_error,
    step_settings,
    tool_payload,
)
from threadline.storage import SqliteStorage
from threadline.testing import Effects, SimulatedObject, ThreadHarness
from threadline.threads.history import read_history
from threadline.threads.model import Outcome, StepEffect


def _run(app: Application, input: Any = None, *, agent: str = "a") -> tuple[Any, list[Any]]:
    async def scenario() -> tuple[Any, list[Any]]:
        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            made = obj.admit("t", agent, input).id
            await obj.run_alarms()
            rows = read_history(obj.storage, "t")
            return obj.submission(made), [(r["kind"], json.loads(r["body_json"])) for r in rows]

    return asyncio.run(scenario())


# -- a step's error ---------------------------------------------------------------------------

def test_a_refusal_no_try_can_fix_fails_the_submission() -> None:
    mapped = step_error(ModelHTTPError(401, "m", {"error": "bad key"}))
    assert isinstance(mapped, HttpClientError)
    assert (mapped.status, mapped.message) == (401, "model m answered 401")
    for status in (408, 409, 425, 429, 500, 503):
        error = ModelHTTPError(status, "m")
        assert step_error(error) is error


def test_a_wait_the_provider_asked_for_is_a_retry_after() -> None:
    mapped = step_error(ModelHTTPError(429, "m", headers={"retry-after": "3"}))
    assert isinstance(mapped, RetryAfter) and mapped.delay_ms == 3_000
    wrapped = RuntimeError("around it")
    wrapped.__cause__ = ModelHTTPError(503, "m", retry_after=0.5)
    assert isinstance(step_error(wrapped), RetryAfter)


def test_an_error_of_threadlines_tree_among_the_causes_is_raised_as_itself() -> None:
    own = HttpTimeout("no answer from https://api.example.com within 5 s")
    outer = ConnectionError("the client wrapped it")
    outer.__cause__ = own
    assert step_error(outer) is own
    plain = RuntimeError("nothing of ours")
    assert step_error(plain) is plain


# -- a tool's step configuration --------------------------------------------------------------

def test_a_step_configuration_says_its_effect_and_retry_only() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert step_settings(None, operation="x") == StepSettings()
    assert step_settings({"effect": "uncertain", "retry": policy}, operation="x") == \
        StepSettings(StepEffect.UNCERTAIN, policy)
    for bad, said in [({"effects": "uncertain"}, "not effects"),
                      ({"effect": "maybe"}, "idempotent or uncertain"),
                      ({"retry": 3}, "RetryPolicy")]:
        with pytest.raises(ValidationFailed, match=said):
            step_settings(bad, operation="x")


def test_a_tool_with_a_bad_configuration_fails_the_submission_at_once() -> None:
    effects = Effects()
    app = support_app(lambda: support_agent(Script(effects), order_tools(
        effects, refund={"effect": "sometimes"})))
    done, _ = _run(app, {"text": "order A1"}, agent="support")
    assert done.outcome is Outcome.FAILED and done.attempts == 1
    assert "refund_order" in done.error["message"] and effects.count("refund_order") == 0


def test_an_accepted_value_is_read_as_the_tools_return_and_a_result_as_itself() -> None:
    assert tool_payload("done by hand") == {"kind": "tool_return", "result": "done by hand"}
    recorded = {"kind": "tool_return", "result": {"a": 1}}
    assert tool_payload(recorded) == recorded


# -- set-ups refused ----------------------------------------------------------------------------

def _app(agent: Agent[Any, Any], *, config: RuntimeConfig | None = None) -> Application:
    app = Application(config or RuntimeConfig())

    @app.agent("a")
    async def run(turn: Turn) -> Any:
        return str((await run_durably(turn, agent, "hi")).output)

    return app


def test_an_agent_without_the_capability_is_refused_at_once() -> None:
    done, records = _run(_app(Agent(TestModel(), name="plain")))
    assert done.outcome is Outcome.FAILED and done.attempts == 1
    assert "ThreadlineDurability" in done.error["message"]
    assert [kind for kind, _ in records] == ["submission.settled"]


def test_a_run_inside_another_runs_tool_is_refused() -> None:
    inner = Agent(TestModel(), name="inner", capabilities=[ThreadlineDurability()])
    tools: FunctionToolset[Any] = FunctionToolset(id="delegate")
    turns: list[Turn] = []

    @tools.tool_plain
    async def ask_inner() -> str:
        return str((await run_durably(turns[0], inner, "hi")).output)

    outer = Agent(TestModel(), name="outer", toolsets=[tools],
                  capabilities=[ThreadlineDurability()])
    app = Application()

    @app.agent("a")
    async def run(turn: Turn) -> Any:
        turns.append(turn)
        return str((await run_durably(turn, outer, "hi")).output)

    done, _ = _run(app)
    assert done.outcome is Outcome.FAILED and done.attempts == 1
    assert "one agent per call" in done.error["message"]


def test_the_capability_refuses_a_reserved_kind_and_a_policy_of_another_type() -> None:
    with pytest.raises(ValidationFailed, match="reserved"):
        ThreadlineDurability(message_kind="submission.mine")
    with pytest.raises(TypeError, match="RetryPolicy"):
        ThreadlineDurability(tool_retry=3)  # type: ignore[arg-type]


# -- what passes through, what runs where ---------------------------------------------------------

def test_an_eviction_a_task_group_wrapped_reaches_the_runtime_as_itself(
    storage: SqliteStorage, clock: ManualClock,
) -> None:
    tools: FunctionToolset[Any] = FunctionToolset(id="grouped")

    @tools.tool_plain
    def lose() -> str:
        raise BaseExceptionGroup("a task group", [ValueError("a sibling"), Evicted("lost")])

    agent = Agent(TestModel(), name="grouped", toolsets=[tools],
                  capabilities=[ThreadlineDurability()])
    h = ThreadHarness(storage, clock, lambda: _app(agent))
    h.admit("t", None, agent="a")
    with pytest.raises(Evicted, match="lost"):
        asyncio.run(h.drive())


def test_a_sync_tool_runs_inline_in_the_attempt() -> None:
    ran_on: list[int] = []
    tools: FunctionToolset[Any] = FunctionToolset(id="where")

    @tools.tool_plain
    def where() -> str:
        ran_on.append(threading.get_ident())
        return "here"

    agent = Agent(TestModel(), name="where", toolsets=[tools],
                  capabilities=[ThreadlineDurability()])
    done, _ = _run(_app(agent))
    assert done.outcome is Outcome.COMPLETED and done.attempts == 1
    assert ran_on == [threading.get_ident()]
    failed = InlineExecutor().submit(int, "x")
    assert isinstance(failed.exception(), ValueError)


def test_outside_run_durably_the_agent_runs_as_without_threadline() -> None:
    effects = Effects()
    agent = support_agent(Script(effects), order_tools(effects))
    result = asyncio.run(agent.run("order A1"))
    assert result.output == "Order A1 shipped and A1 refunded."
    assert effects.count("lookup_order") == effects.count("refund_order") == 1


# -- the messages a run keeps -------------------------------------------------------------------

def test_a_run_whose_messages_do_not_fit_keeps_its_prompt_and_answer() -> None:
    tools: FunctionToolset[Any] = FunctionToolset(id="big")

    @tools.tool_plain
    def fetch_page() -> str:
        return "x" * 3_000

    agent = Agent(TestModel(custom_output_text="short answer"), name="big", toolsets=[tools],
                  capabilities=[ThreadlineDurability()])
    done, records = _run(_app(agent, config=RuntimeConfig(max_value_bytes=4_096)))
    assert done.outcome is Outcome.COMPLETED, done.error
    [kept] = [body for kind, body in records if kind == "pydantic_ai.messages"]
    assert [m["kind"] for m in kept["messages"]] == ["request", "response"]
    assert kept["messages"][1]["parts"][0]["content"] == "short answer"
