"""The test kit's fake provider speaks the OpenAI-compatible chat-completions protocol, the
same over a real socket (workerd, the bench) as through ``FakeFetch`` (CPython tests)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.testing import FakeFetch, FakeProvider, Refusal, SimulatedObject
from threadline.threads.model import Outcome

BODY = {"model": "m", "messages": [{"role": "user", "content": "one two three"}]}


def _deltas(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line[6:])["choices"][0] for line in lines
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_the_served_provider_streams_chunks_then_done() -> None:
    provider = FakeProvider(tokens=5, token_gap_ms=1)
    with provider.serve() as base, httpx.Client() as client, client.stream(
            "POST", base + "/chat/completions", json={**BODY, "stream": True}) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/event-stream"
        lines = list(answer.iter_lines())
    choices = _deltas(lines)
    assert "".join(c["delta"].get("content", "") for c in choices) == "one two three one two"
    assert choices[0]["delta"]["role"] == "assistant"
    assert choices[-1]["finish_reason"] == "stop"
    assert [line for line in lines if line][-1] == "data: [DONE]"
    assert provider.requests == [{**BODY, "stream": True}]


def test_the_served_provider_answers_whole_refuses_as_scripted_and_calls_tools() -> None:
    provider = FakeProvider(tokens=2, refusals=[Refusal(429, "3"), Refusal(503)],
                            tool="lookup")
    with provider.serve() as base, httpx.Client() as client:
        limited = client.post(base + "/chat/completions", json=BODY)
        assert (limited.status_code, limited.headers["retry-after"]) == (429, "3")
        assert client.post(base + "/chat/completions", json=BODY).status_code == 503
        called = client.post(base + "/chat/completions", json=BODY).json()
        [choice] = called["choices"]
        assert choice["finish_reason"] == "tool_calls"
        call = choice["message"]["tool_calls"][0]
        assert call["function"]["name"] == "lookup"
        assert json.loads(call["function"]["arguments"]) == {"query": "one two"}
        answered = client.post(base + "/chat/completions", json={**BODY, "messages": [
            *BODY["messages"], {"role": "tool", "content": "found", "tool_call_id": "c"}]})
        assert answered.json()["choices"][0]["message"]["content"] == "one two"
        assert client.post(base + "/elsewhere", json=BODY).status_code == 404
        assert client.post(base + "/chat/completions", content=b"[1]").status_code == 400


def test_under_the_simulated_clock_a_real_server_times_out_and_the_fake_fetch_answers() -> None:
    """What README's testing note says: the simulated clock skips to a call's timeout while it
    waits on a real socket, so a served provider answering in 200 ms of wall time times out
    (on the clock, 10 s later); the same provider through ``FakeFetch`` answers."""
    app = Application(RuntimeConfig(max_attempts=1))

    @app.agent("ask")
    async def ask(turn: Turn) -> Any:
        async def call() -> Any:
            answer = await turn.http.post(turn.env.URL + "/chat/completions", json=BODY,
                                          timeout=10)
            return answer.raise_for_status().json()["choices"][0]["message"]["content"]

        return await turn.step("model", call)

    async def ask_through(url: str, http: Any, clock: ManualClock) -> Any:
        async with SimulatedObject(app, clock=clock, http=http, env={"URL": url}) as obj:
            made = obj.admit("t", "ask", {}).id
            await obj.run_alarms()
            return obj.submission(made)

    provider = FakeProvider(tokens=2, first_token_ms=200)
    with provider.serve() as base:
        clock = ManualClock()
        began = clock.now_ms()
        done = asyncio.run(ask_through(base, None, clock))
    assert done.outcome is Outcome.FAILED and done.error["type"] == "HttpTimeout"
    assert clock.now_ms() - began >= 10_000
    clock = ManualClock()
    done = asyncio.run(ask_through("https://models.test/v1",
                                   FakeFetch(provider.handler(clock)), clock))
    assert (done.outcome, done.result) == (Outcome.COMPLETED, "one two")
