"""The example ``chat`` agent of src/entry.py against the fake provider: it streams the model's
answer, keeps one record per message, carries the conversation across turns, and waits out a
rate limit without spending an Attempt."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from api_support import load_example_app

from threadline import ManualClock
from threadline.testing import FakeFetch, FakeProvider, Refusal, SimulatedObject
from threadline.threads.history import read_history
from threadline.threads.model import Outcome

START = 1_000_000
ENV = {"MODEL_URL": "https://models.example.com/v1/", "MODEL_API_KEY": "sk-example"}


def _chat(provider: FakeProvider, texts: list[str]) -> tuple[list[Any], list[Any], FakeFetch]:
    clock = ManualClock(START)
    fetch = FakeFetch(provider.handler(clock))

    async def scenario() -> tuple[list[Any], list[Any]]:
        async with SimulatedObject(load_example_app(), clock=clock, http=fetch,
                                   env=ENV) as obj:
            done = []
            for text in texts:
                made = obj.admit("t", "chat", {"text": text}).id
                await obj.run_alarms(until=clock.now_ms() + 600_000)
                done.append(obj.submission(made))
            rows = read_history(obj.storage, "t")
            return done, [json.loads(row["body_json"]) for row in rows
                          if row["kind"] == "message"]

    done, messages = asyncio.run(scenario())
    return done, messages, fetch


def test_chat_streams_the_models_answer_and_keeps_one_record_per_message() -> None:
    provider = FakeProvider(tokens=6, first_token_ms=1_000, token_gap_ms=200)
    [done], messages, fetch = _chat(provider, ["hello there model"])
    assert done.outcome is Outcome.COMPLETED
    assert done.result == {"text": "hello there model hello there model"}
    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "hello there model"), ("assistant", "hello there model hello there model")]
    assert messages[1]["stream"].startswith(done.id)
    [sent] = fetch.requests
    assert sent.url == "https://models.example.com/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-example"
    assert json.loads(sent.body or b"")["stream"] is True


def test_a_second_turn_sends_the_conversation_so_far() -> None:
    provider = FakeProvider(tokens=2)
    done, _, _ = _chat(provider, ["first question", "second question"])
    assert [d.outcome for d in done] == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert provider.requests[1]["messages"] == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first question"},
        {"role": "user", "content": "second question"}]


def test_a_rate_limited_turn_waits_as_asked_and_spends_no_attempt() -> None:
    provider = FakeProvider(tokens=3, refusals=[Refusal(429, "2")])
    [done], messages, fetch = _chat(provider, ["slow down"])
    assert done.outcome is Outcome.COMPLETED and done.attempts == 1
    assert len(fetch.requests) == 2
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_a_provider_refusing_the_key_fails_the_turn_at_once() -> None:
    provider = FakeProvider(refusals=[Refusal(401)])
    [done], messages, _ = _chat(provider, ["hi"])
    assert done.outcome is Outcome.FAILED and done.attempts == 1
    assert done.error["type"] == "HttpClientError"
    assert done.error["message"] == "https://models.example.com answered 401"
    assert [m["role"] for m in messages] == ["user"]
