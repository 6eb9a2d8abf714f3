"""Pydantic AI's OpenAI model over ``turn.http``, against the test kit's fake provider.

``openai_model`` sends every request through the object's outbound port (``FakeFetch``
answered by ``FakeProvider``): the key comes from the Worker's environment, the answer streams
into one message record, a 429's ``Retry-After`` is waited out without spending an Attempt
(in the Attempt when short, on a durable timer when long), a refused key fails the submission
at once, a tool the provider calls runs as a step, and the next turn sends the conversation.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic_ai import Agent

from threadline import Application, ManualClock, Turn
from threadline.fetching import FetchRequest
from threadline.pydantic_ai import ThreadlineDurability, openai_model, run_durably
from threadline.testing import FakeAnswer, FakeFetch, FakeProvider, Refusal, SimulatedObject
from threadline.threads.history import read_history
from threadline.threads.model import Outcome, Submission, WaitKind

START = 1_000_000
BASE = "https://models.example.com/v1"
ENV = {"MODEL_API_KEY": "sk-example"}


def chat_app(*, tool: bool = False) -> Application:
    model = openai_model("fake-model", base_url=BASE, api_key=lambda env: env.MODEL_API_KEY)
    agent: Agent[None, str] = Agent(model, name="chat", capabilities=[ThreadlineDurability()])
    if tool:
        @agent.tool_plain
        def lookup(query: str) -> str:
            """Look something up."""
            return f"found {query}"

    app = Application()

    @app.agent("chat")
    async def chat(turn: Turn) -> dict[str, Any]:
        result = await run_durably(turn, agent, turn.input["text"])
        return {"text": result.output}

    return app


class Timed:
    """The fake provider behind a FakeFetch, each request's time on the object's clock kept."""

    def __init__(self, provider: FakeProvider, clock: ManualClock) -> None:
        self.times: list[int] = []
        answer = provider.handler(clock)

        def handler(request: FetchRequest) -> FakeAnswer:
            self.times.append(clock.now_ms())
            return answer(request)

        self.fetch = FakeFetch(handler)


def _turns(provider: FakeProvider, texts: list[str], *, tool: bool = False,
           probe: Any = None) -> tuple[list[Submission], list[Any], Timed]:
    clock = ManualClock(START)
    timed = Timed(provider, clock)

    async def scenario() -> tuple[list[Submission], list[Any]]:
        async with SimulatedObject(chat_app(tool=tool), clock=clock, http=timed.fetch,
                                   env=ENV) as obj:
            done = []
            for text in texts:
                made = obj.admit("t", "chat", {"text": text}).id
                if probe is not None:
                    await probe(obj, made)
                await obj.run_alarms(until=clock.now_ms() + 600_000)
                done.append(obj.submission(made))
            rows = read_history(obj.storage, "t")
            return done, [(row["kind"], json.loads(row["body_json"])) for row in rows]

    done, records = asyncio.run(scenario())
    return done, records, timed


def test_the_answer_streams_through_the_port_into_one_message_record() -> None:
    provider = FakeProvider(tokens=4)
    [done], records, timed = _turns(provider, ["hello there model"])
    assert done.outcome is Outcome.COMPLETED and done.attempts == 1
    assert done.result == {"text": "hello there model hello"}
    [sent] = timed.fetch.requests
    assert sent.url == f"{BASE}/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-example"
    assert "accept-encoding" not in sent.headers and "host" not in sent.headers
    body = json.loads(sent.body or b"")
    assert (body["model"], body["stream"]) == ("fake-model", True)
    messages = [body for kind, body in records if kind == "message"]
    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "hello there model"), ("assistant", "hello there model hello")]
    assert messages[1]["stream"].startswith(done.id)


def test_a_rate_limit_is_waited_out_as_asked_without_spending_an_attempt() -> None:
    provider = FakeProvider(tokens=3, refusals=[Refusal(429, "2")])
    [done], records, timed = _turns(provider, ["slow down"])
    assert done.outcome is Outcome.COMPLETED and done.attempts == 1
    assert len(timed.times) == 2 and timed.times[1] - timed.times[0] >= 2_000
    # The refused try streamed nothing; the one message is the answer that came.
    assert [body["role"] for kind, body in records if kind == "message"] == [
        "user", "assistant"]


def test_a_long_retry_after_waits_on_a_durable_timer() -> None:
    provider = FakeProvider(tokens=3, refusals=[Refusal(429, "60")])
    seen: list[Any] = []

    async def probe(obj: SimulatedObject, made: str) -> None:
        await obj.run_alarms(until=obj.clock.now_ms() + 10_000)
        seen.extend(obj.waits(made))

    [done], _, timed = _turns(provider, ["later please"], probe=probe)
    [wait] = seen
    assert wait.kind is WaitKind.TIMER and wait.key.endswith("~retry_after#1")
    assert done.outcome is Outcome.COMPLETED and done.attempts == 1
    assert timed.times[1] - timed.times[0] >= 60_000


def test_a_refused_key_fails_the_submission_at_once() -> None:
    provider = FakeProvider(refusals=[Refusal(401)])
    [done], records, timed = _turns(provider, ["hi"])
    assert done.outcome is Outcome.FAILED and done.attempts == 1
    assert done.error is not None and done.error["type"] == "HttpClientError"
    assert len(timed.fetch.requests) == 1
    assert [kind for kind, _ in records] == ["message", "submission.settled"]


def test_a_tool_the_provider_calls_runs_as_a_step_and_its_result_goes_back() -> None:
    provider = FakeProvider(tokens=2, tool="lookup")
    [done], records, _ = _turns(provider, ["order A1"], tool=True)
    assert done.outcome is Outcome.COMPLETED
    assert done.result == {"text": "order A1"}
    first, second = provider.requests
    assert first["tools"][0]["function"]["name"] == "lookup"
    [returned] = [m for m in second["messages"] if m["role"] == "tool"]
    assert returned["content"] == "found order A1"
    # One message record: the tool-calling answer has no text to stream.
    assert [body["role"] for kind, body in records if kind == "message"] == [
        "user", "assistant"]


def test_the_next_turn_sends_the_conversation_so_far() -> None:
    provider = FakeProvider(tokens=2)
    done, _, _ = _turns(provider, ["first question", "second question"])
    assert [d.outcome for d in done] == [Outcome.COMPLETED, Outcome.COMPLETED]
    said = [(m["role"], m["content"]) for m in provider.requests[1]["messages"]]
    assert said == [("user", "first question"), ("assistant", "first question"),
                    ("user", "second question")]
