"""Agents, host lanes and schedules read the Worker's environment, and cannot change it.

``turn.env`` (``ctx.env`` for lanes and schedules) is the environment the object was started
with: a mapping or an object with attributes under CPython, the Worker's ``env`` in workerd.
A name it does not hold is an error naming the name; nothing user code does writes to it,
and no message or repr shows a value.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from threadline import Application, Environment, LaneContext, ScheduleContext, Turn
from threadline.clock import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, SubmissionState

SECRET = "sk-test-0123456789abcdef"


def _app(seen: dict[str, Any], *, schedule: bool = False) -> Application:
    app = Application()

    @app.agent("reads")
    async def reads(turn: Turn) -> Any:
        return {"key": turn.env.API_KEY == SECRET, "item": turn.env["API_KEY"] == SECRET,
                "missing": turn.env.get("NOT_SET", "fallback"),
                "has": "API_KEY" in turn.env, "has_not": "NOT_SET" in turn.env}

    @app.agent("needs_unset")
    async def needs_unset(turn: Turn) -> Any:
        return turn.env.NOT_SET

    @app.agent("writes")
    async def writes(turn: Turn) -> Any:
        turn.env.API_KEY = "stolen"  # type: ignore[misc]

    @app.lane("poll")
    async def poll(ctx: LaneContext) -> None:
        seen["lane"] = ctx.env.API_KEY

    if schedule:
        @app.every(timedelta(minutes=1), id="tick")
        async def tick(ctx: ScheduleContext) -> None:
            seen["schedule"] = ctx.env.get("API_KEY")

    return app


@pytest.mark.parametrize("env", [{"API_KEY": SECRET}, SimpleNamespace(API_KEY=SECRET)],
                         ids=["mapping", "attributes"])
def test_an_agent_a_lane_and_a_schedule_read_the_environment(env: Any) -> None:
    async def scenario() -> None:
        seen: dict[str, Any] = {}
        async with SimulatedObject(_app(seen, schedule=True), clock=ManualClock(1_000_000),
                                   env=env) as obj:
            reads = obj.admit("t", "reads", {}).id
            await obj.run_alarms(until=obj.clock.now_ms() + 1_000)
            obj.wake_lane("poll")
            await obj.run_alarms(until=obj.clock.now_ms() + 120_000)
            done = obj.submission(reads)
            assert done.outcome is Outcome.COMPLETED
            assert done.result == {"key": True, "item": True, "missing": "fallback",
                                   "has": True, "has_not": False}
            assert seen == {"lane": SECRET, "schedule": SECRET}

    asyncio.run(scenario())


def test_a_name_not_set_fails_the_attempt_naming_it_and_no_value() -> None:
    async def scenario() -> None:
        async with SimulatedObject(_app({}), clock=ManualClock(1_000_000),
                                   env={"API_KEY": SECRET}) as obj:
            failed = obj.admit("t", "needs_unset", {}).id
            await obj.run_alarms()
            sub = obj.submission(failed)
            assert sub.state is SubmissionState.SETTLED and sub.outcome is Outcome.FAILED
            assert isinstance(sub.error, dict) and sub.error["type"] == "AttributeError"
            assert "NOT_SET" in sub.error["message"] and SECRET not in str(sub.error)

    asyncio.run(scenario())


def test_an_agent_cannot_change_the_environment() -> None:
    async def scenario() -> None:
        env = {"API_KEY": SECRET}
        async with SimulatedObject(_app({}), clock=ManualClock(1_000_000), env=env) as obj:
            writes = obj.admit("t", "writes", {}).id
            reads = obj.admit("u", "reads", {}).id
            await obj.run_alarms()
            sub = obj.submission(writes)
            assert isinstance(sub.error, dict) and sub.error["type"] == "TypeError"
            assert obj.submission(reads).result["key"] is True  # type: ignore[index]
            assert env == {"API_KEY": SECRET}

    asyncio.run(scenario())


def test_the_view_refuses_every_write_and_shows_no_value() -> None:
    env = Environment({"API_KEY": SECRET})
    for write in (lambda: setattr(env, "API_KEY", "x"), lambda: delattr(env, "API_KEY"),
                  lambda: env.__setitem__("API_KEY", "x"), lambda: env.__delitem__("API_KEY")):
        with pytest.raises(TypeError, match="read-only"):
            write()
    with pytest.raises(KeyError, match="NOT_SET"):
        env["NOT_SET"]
    assert SECRET not in repr(env)
    assert env.get("_source") is None  # the view's own state is not a name it holds
    assert Environment().get("API_KEY") is None and "API_KEY" not in Environment()
