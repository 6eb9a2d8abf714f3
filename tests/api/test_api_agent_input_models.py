"""``@app.agent(..., input=Model)``: input is validated at every admission, the agent reads the
parsed model, and the OpenAPI document shows each agent's schema."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from api_support import Api, make_api
from pydantic import BaseModel, Field

from threadline import Application, ManualClock, ScheduleContext, Turn
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome


class ChatInput(BaseModel):
    """What the chat agent takes."""

    text: str = Field(min_length=1, max_length=2_000)
    temperature: float = Field(0.5, ge=0, le=2)


def _typed(app: Application) -> None:
    @app.agent("typed", input=ChatInput)
    async def typed(turn: Turn) -> Any:
        chat: ChatInput = turn.input
        return {"kind": type(chat).__name__, "text": chat.text, "t": chat.temperature}


@pytest.fixture
def api(clock: ManualClock) -> Api:
    return make_api(clock, _typed)


def test_valid_input_is_admitted_and_the_agent_reads_the_parsed_model(api: Api) -> None:
    reply = api.submit("t1", {"text": "hi"}, agent="typed")
    assert reply.status == 202, reply.body
    api.drive()
    done = api.call("GET", api.submission_path("t1", reply.json()["id"])).json()
    assert done["result"] == {"kind": "ChatInput", "text": "hi", "t": 0.5}
    # What was submitted is what is kept: the model's defaults are the agent's view only.
    assert done["input"] == {"text": "hi"}


@pytest.mark.parametrize(("bad", "named"), [
    ({}, "input.text: Field required"),
    ({"text": ""}, "input.text: String should have at least 1 character"),
    ({"text": "hi", "temperature": 9}, "input.temperature: Input should be less than or equal"),
    ("just text", "input: Input should be a valid dictionary"),
])
def test_invalid_input_is_refused_with_422_naming_the_field_and_nothing_is_written(
    api: Api, bad: Any, named: str,
) -> None:
    reply = api.submit("t1", bad, agent="typed")
    assert reply.status == 422, reply.body
    problem = reply.json()
    assert named in problem["detail"] and problem["field"] == "input"
    assert api.storage.exec("SELECT COUNT(*) AS n FROM tl_submissions").one()["n"] == 0


def test_the_openapi_document_shows_each_agents_input_schema(api: Api) -> None:
    document = api.call("GET", "/v1/openapi.json").json()
    agents = {agent["name"]: agent for agent in document["x-agents"]}
    assert agents["echo"]["input"] == {}
    ref = agents["typed"]["input"]["$ref"]
    schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert schema["required"] == ["text"]
    assert schema["properties"]["temperature"]["maximum"] == 2


def test_a_schedule_a_message_and_turn_submit_are_held_to_the_model_too() -> None:
    app = Application()
    _typed(app)

    @app.agent("relay")
    async def relay(turn: Turn) -> Any:
        return await turn.submit("t2", {"text": ""}, agent="typed")

    fired: list[str] = []

    @app.every(timedelta(minutes=1), id="tick")
    async def tick(ctx: ScheduleContext) -> None:
        try:
            await ctx.submit("t3", {"wrong": True}, agent="typed")
        except Exception as error:
            fired.append(type(error).__name__)

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            made = obj.admit("t1", "relay", {}).id
            await obj.run_alarms(until=obj.clock.now_ms() + 300_000)
            return obj.submission(made), obj.submissions("t2"), obj.submissions("t3")

    relayed, second, third = asyncio.run(scenario())
    assert relayed.outcome is Outcome.FAILED and relayed.error["type"] == "ValidationFailed"
    assert "input.text" in relayed.error["message"]
    assert second == [] and third == []
    assert fired and set(fired) == {"ValidationFailed"}


def test_an_input_model_must_be_a_pydantic_model() -> None:
    app = Application()
    with pytest.raises(TypeError, match="pydantic model class"):
        @app.agent("wrong", input=dict)  # type: ignore[arg-type]
        async def wrong(turn: Turn) -> None:
            return None


def test_a_message_whose_input_does_not_fit_fails_with_message_failed() -> None:
    app = Application()
    _typed(app)

    @app.agent("sender")
    async def sender(turn: Turn) -> Any:
        return await turn.send("acme", "t4", {"text": 5}, agent="typed")

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=ManualClock(1_000_000), space="acme") as obj:
            obj.admit("t1", "sender", {})
            await obj.run_alarms(until=obj.clock.now_ms() + 60_000)
            rows = obj.storage.exec(
                "SELECT kind, body_json FROM tl_history WHERE thread_id = 't1'").rows
            return obj.submissions("t4"), rows

    delivered, rows = asyncio.run(scenario())
    assert delivered == []
    [failed] = [row for row in rows if row["kind"] == "message.failed"]
    assert "input.text" in failed["body_json"]
