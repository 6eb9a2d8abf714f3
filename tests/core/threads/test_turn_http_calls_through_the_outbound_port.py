"""``turn.http``: an agent's HTTP calls go through the object's outbound port, inside steps.

The request is sent as the agent wrote it, the answer read whole or as it arrives, bounded in
size and time (on the object's clock), and every failure is an error of threadline's tree that
names the destination by its origin only. A call outside a step is refused before anything is
sent: its answer would not be journaled, so a replay would send it again.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from threadline import (
    AnswerTooLarge,
    Application,
    HttpClientError,
    HttpServerError,
    HttpTimeout,
    HttpTransportError,
    RuntimeConfig,
    Turn,
    ValidationFailed,
)
from threadline.clock import ManualClock
from threadline.fetching import FetchRequest
from threadline.testing import FakeAnswer, FakeFetch, SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.turn_base import STEP_FINISHED

URL = "https://api.example.com/v1/chat/completions?key=secret-in-query"
START = 1_000_000


def _run(app: Application, fetch: FakeFetch, agent: str, *, input: Any = None,
         crash: str | None = None) -> Any:
    async def scenario() -> Any:
        async with SimulatedObject(app, clock=ManualClock(START), http=fetch) as obj:
            if crash is not None:
                obj.crash_at(crash)
            made = obj.admit("t", agent, input if input is not None else {}).id
            await obj.run_alarms(until=START + 3_600_000)
            return obj.submission(made)

    return asyncio.run(scenario())


def test_a_request_in_a_step_is_sent_as_written_and_its_answer_read() -> None:
    app = Application()

    @app.agent("asks")
    async def asks(turn: Turn) -> Any:
        async def call() -> Any:
            answer = await turn.http.post(
                URL, json={"prompt": turn.input["prompt"]},
                headers={"Authorization": "Bearer sk-live", "X-Trace": "1"})
            return {"status": answer.status, "ok": answer.ok, "type": answer.headers["x-kind"],
                    "json": answer.json(), "text": answer.text()}
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer.of_json(
        {"echo": json.loads(request.body or b"null")}, headers={"X-Kind": "reply"}))
    done = _run(app, fetch, "asks", input={"prompt": "hi"})
    assert done.outcome is Outcome.COMPLETED
    assert done.result == {"status": 200, "ok": True, "type": "reply",
                           "json": {"echo": {"prompt": "hi"}},
                           "text": '{"echo": {"prompt": "hi"}}'}
    [sent] = fetch.requests
    assert (sent.method, sent.url) == ("POST", URL)
    assert sent.headers == {"authorization": "Bearer sk-live", "x-trace": "1",
                            "content-type": "application/json"}
    assert json.loads(sent.body or b"") == {"prompt": "hi"}
    assert fetch.answers[0].closed


def test_a_replay_after_the_step_finished_does_not_send_again() -> None:
    app = Application()

    @app.agent("asks")
    async def asks(turn: Turn) -> Any:
        async def call() -> Any:
            return (await turn.http.get("https://api.example.com/n")).json()
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer.of_json(len(fetch.requests)))
    done = _run(app, fetch, "asks", crash=STEP_FINISHED)
    assert done.outcome is Outcome.COMPLETED
    assert done.result == 1
    assert len(fetch.requests) == 1


def test_a_call_outside_a_step_is_refused_before_anything_is_sent() -> None:
    app = Application()

    @app.agent("bare")
    async def bare(turn: Turn) -> Any:
        return (await turn.http.get("https://api.example.com/")).status

    @app.agent("in_task")
    async def in_task(turn: Turn) -> Any:
        # A task the step's function starts is inside the step too.
        async def call() -> Any:
            return (await asyncio.create_task(turn.http.get("https://api.example.com/"))).status
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer(204))
    refused = _run(app, fetch, "bare")
    assert refused.outcome is Outcome.FAILED
    assert refused.error["type"] == "ValidationFailed"
    assert "inside a step" in refused.error["message"]
    assert refused.attempts == 1
    assert fetch.requests == []
    assert _run(app, fetch, "in_task").result == 204


def test_a_streamed_answer_arrives_line_by_line_as_it_is_written() -> None:
    app = Application()
    clock = ManualClock(START)
    seen: list[tuple[int, str]] = []

    async def body() -> Any:
        yield b"data: one\r\n\r\nda"
        await clock.sleep_until(clock.now_ms() + 1_000)
        yield b"ta: tw"
        await clock.sleep_until(clock.now_ms() + 1_000)
        yield b"o\n\ndata: [DONE]"

    @app.agent("streams")
    async def streams(turn: Turn) -> Any:
        async def call() -> Any:
            async with turn.http.stream("POST", URL, json={"stream": True}) as answer:
                async for line in answer.aiter_lines():
                    if line:
                        seen.append((clock.now_ms() - START, line))
            return [line for _, line in seen]
        return await turn.step("stream", call)

    fetch = FakeFetch(lambda request: FakeAnswer(200, {"content-type": "text/event-stream"},
                                                 body()))

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=clock, http=fetch) as obj:
            made = obj.admit("t", "streams", {}).id
            await obj.run_alarms(until=START + 60_000)
            return obj.submission(made)

    done = asyncio.run(scenario())
    assert done.result == ["data: one", "data: two", "data: [DONE]"]
    # Each line was handed over when its chunk came, not when the body ended.
    first = seen[0][0]
    assert [at - first for at, _ in seen] == [0, 2_000, 2_000]


def test_an_answer_past_max_bytes_is_refused_and_closed() -> None:
    app = Application(RuntimeConfig(max_attempts=1))

    @app.agent("big")
    async def big(turn: Turn) -> Any:
        async def call() -> Any:
            return (await turn.http.get("https://api.example.com/big", max_bytes=10)).text()
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer(200, {}, [b"12345", b"67890", b"1"]))
    done = _run(app, fetch, "big")
    assert done.outcome is Outcome.FAILED
    assert done.error["type"] == "AnswerTooLarge"
    assert "https://api.example.com grew past 10 bytes" in done.error["message"]
    assert fetch.answers[0].closed
    assert issubclass(AnswerTooLarge, HttpServerError.__mro__[2])  # an HttpError


def test_no_answer_within_the_timeout_on_the_objects_clock_is_an_http_timeout() -> None:
    app = Application(RuntimeConfig(max_attempts=1))
    opened_at: list[int] = []

    async def never(request: FetchRequest) -> FakeAnswer:
        opened_at.append(clock.now_ms())
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    clock = ManualClock(START)

    @app.agent("waits")
    async def waits(turn: Turn) -> Any:
        async def call() -> Any:
            try:
                await turn.http.get(URL, timeout=7.5)
            except HttpTimeout as error:
                return {"message": error.message, "after": clock.now_ms() - opened_at[0]}
            return None
        return await turn.step("ask", call)

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=clock, http=FakeFetch(never)) as obj:
            made = obj.admit("t", "waits", {}).id
            await obj.run_alarms(until=START + 60_000)
            return obj.submission(made)

    done = asyncio.run(scenario())
    assert done.result == {"message": "no answer from https://api.example.com within 7.5 s",
                           "after": 7_500}


def test_a_stream_that_stops_sending_times_out_between_chunks() -> None:
    app = Application(RuntimeConfig(max_attempts=1))

    async def stalls() -> Any:
        yield b"data: one\n"
        await asyncio.Event().wait()

    @app.agent("stalls")
    async def stalled(turn: Turn) -> Any:
        async def call() -> Any:
            lines = []
            async with turn.http.stream("GET", URL, timeout=3) as answer:
                async for line in answer.aiter_lines():
                    lines.append(line)
            return lines
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer(200, {}, stalls()))
    done = _run(app, fetch, "stalls")
    assert done.error["type"] == "HttpTimeout"
    assert done.error["message"] == "https://api.example.com sent nothing more within 3 s"
    assert fetch.answers[0].closed


def test_a_failed_connection_is_a_transport_error_naming_only_the_origin() -> None:
    app = Application(RuntimeConfig(max_attempts=2))

    def refuse(request: FetchRequest) -> FakeAnswer:
        raise ConnectionRefusedError(f"refused {request.url}")

    @app.agent("asks")
    async def asks(turn: Turn) -> Any:
        async def call() -> Any:
            return (await turn.http.get(URL, headers={"authorization": "Bearer sk-live"})).status
        return await turn.step("ask", call)

    fetch = FakeFetch(refuse)
    done = _run(app, fetch, "asks")
    assert done.outcome is Outcome.FAILED
    assert done.attempts == 2  # retried, like any transient failure
    assert done.error["type"] == "HttpTransportError"
    assert done.error["message"] == ("GET https://api.example.com failed before an answer"
                                     " (ConnectionRefusedError)")
    assert "secret-in-query" not in json.dumps(done.error)
    assert "sk-live" not in json.dumps(done.error)
    assert issubclass(HttpTransportError, HttpServerError.__mro__[2])


@pytest.mark.parametrize(("status", "raised", "attempts"), [
    (401, "HttpClientError", 1), (404, "HttpClientError", 1), (500, "HttpServerError", 3),
    (429, "HttpServerError", 3), (408, "HttpServerError", 3), (503, "HttpServerError", 3),
])
def test_raise_for_status_fails_at_once_on_a_4xx_and_retries_a_5xx_or_rate_limit(
    status: int, raised: str, attempts: int,
) -> None:
    app = Application(RuntimeConfig(max_attempts=3))

    @app.agent("asks")
    async def asks(turn: Turn) -> Any:
        async def call() -> Any:
            return (await turn.http.get(URL)).raise_for_status().status
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer(status, {}, b'{"error": "nope"}'))
    done = _run(app, fetch, "asks")
    assert done.outcome is Outcome.FAILED
    assert done.error["type"] == raised
    assert done.error["message"] == f"https://api.example.com answered {status}"
    assert done.attempts == attempts
    assert len(fetch.requests) == attempts


def test_a_status_error_keeps_the_status_and_a_bounded_body() -> None:
    app = Application()

    @app.agent("asks")
    async def asks(turn: Turn) -> Any:
        async def call() -> Any:
            try:
                async with turn.http.stream("GET", URL) as answer:
                    await answer.raise_for_status()
            except HttpClientError as error:
                return {"status": error.status, "body": len(error.body),
                        "start": error.body[:9].decode()}
            return None
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer(400, {}, [b'{"error":', b"x" * 10_000]))
    assert _run(app, fetch, "asks").result == {"status": 400, "body": 4_096,
                                               "start": '{"error":'}


@pytest.mark.parametrize(("options", "field"), [
    ({"method": "TRACE"}, "method"),
    ({"url": "ftp://api.example.com/"}, "url"),
    ({"url": "/relative"}, "url"),
    ({"headers": {"x-evil": "a\r\nset-cookie: b"}}, "headers"),
    ({"headers": {"x-n": 1}}, "headers"),
    ({"json": {"a": 1}, "content": b"x"}, "content"),
    ({"json": {"a": float("nan")}}, "json"),
    ({"content": 12}, "content"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": float("inf")}, "timeout"),
    ({"timeout": 601}, "timeout"),
    ({"max_bytes": 0}, "max_bytes"),
    ({"max_bytes": 32 * 1024 * 1024 + 1}, "max_bytes"),
])
def test_a_malformed_request_is_refused_naming_its_field_and_sends_nothing(
    options: dict[str, Any], field: str,
) -> None:
    app = Application()
    options = dict(options)  # the parameter is shared by every run of the test: keep it whole
    method = options.pop("method", "GET")
    url = options.pop("url", URL)

    @app.agent("asks")
    async def asks(turn: Turn) -> Any:
        async def call() -> Any:
            try:
                await turn.http.request(method, url, **options)
            except ValidationFailed as error:
                return {"field": error.field, "message": error.message}
            return None
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer(200))
    done = _run(app, fetch, "asks")
    assert done.result["field"] == field
    assert fetch.requests == []
    # A header's value is never echoed: it may be a credential.
    assert "set-cookie" not in done.result["message"]


def test_an_object_whose_port_only_posts_says_so() -> None:
    class PostOnly:
        async def post(self, url: str, *, headers: Any, body: bytes, timeout_ms: int) -> Any:
            raise AssertionError("not called")

    app = Application()

    @app.agent("asks")
    async def asks(turn: Turn) -> Any:
        async def call() -> Any:
            return (await turn.http.get(URL)).status
        return await turn.step("ask", call)

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=ManualClock(START), http=PostOnly()) as obj:
            made = obj.admit("t", "asks", {}).id
            await obj.run_alarms(until=START + 60_000)
            return obj.submission(made)

    done = asyncio.run(scenario())
    assert done.error["type"] == "ValidationFailed"
    assert "cannot make an agent's requests" in done.error["message"]


@pytest.mark.parametrize("options", [
    {"timeout": 600}, {"timeout": 0.001}, {"max_bytes": 32 * 1024 * 1024}, {"max_bytes": 1},
    {"url": "https://api.example.com/" + "a" * (8_192 - 24)}, {"method": "patch"},
    {"content": "text"}, {"content": b"bytes"}, {"headers": {"X-Empty": ""}},
])
def test_a_request_at_the_edge_of_each_bound_is_sent(options: dict[str, Any]) -> None:
    app = Application()
    options = dict(options)
    method = options.pop("method", "POST")
    url = options.pop("url", URL)

    @app.agent("asks")
    async def asks(turn: Turn) -> Any:
        async def call() -> Any:
            return (await turn.http.request(method, url, **options)).status
        return await turn.step("ask", call)

    fetch = FakeFetch(lambda request: FakeAnswer(204))
    done = _run(app, fetch, "asks")
    assert done.result == 204, done.error
    [sent] = fetch.requests
    assert (sent.method, sent.url) == (method.upper(), url)
    if "content" in options:
        assert sent.body == b"text" if options["content"] == "text" else b"bytes"
