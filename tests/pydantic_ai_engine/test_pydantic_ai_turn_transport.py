"""``TurnTransport``: an httpx2 client's requests leave through ``turn.http``.

Only inside a durable run's step: outside ``run_durably`` a request is refused before anything
is sent. The port's decoded body is handed over without the wire's ``content-encoding``, a body
iterated again goes on where it stopped, and the port's timeout on the object's clock reaches
the client as httpx2's own ``ReadTimeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from threadline import Application, ManualClock, Turn
from threadline.errors import ValidationFailed
from threadline.fetching import FetchRequest
from threadline.pydantic_ai import TurnTransport
from threadline.pydantic_ai.active_run import ActiveRun, running
from threadline.testing import FakeAnswer, FakeFetch, SimulatedObject


def _through(handler: Any, call: Any) -> tuple[Any, FakeFetch]:
    """Run ``call(client)`` in a step of a durable run; its value and the port's log."""
    fetch = FakeFetch(handler)
    app = Application()

    @app.agent("probe")
    async def probe(turn: Turn) -> Any:
        client = httpx2.AsyncClient(transport=TurnTransport(timeout=5))

        async def send() -> Any:
            with running(ActiveRun(turn, "message")):
                return await call(client)

        return await turn.step("send", send)

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=ManualClock(1_000_000), http=fetch) as obj:
            made = obj.admit("t", "probe", None).id
            await obj.run_alarms()
            return obj.submission(made)

    return asyncio.run(scenario()), fetch


def test_a_request_goes_out_through_the_port_and_its_decoded_body_comes_back() -> None:
    def handler(request: FetchRequest) -> FakeAnswer:
        return FakeAnswer(200, {"content-encoding": "gzip", "content-length": "999",
                                "x-kept": "yes"}, [b"plain ", b"text"])

    async def call(client: httpx2.AsyncClient) -> Any:
        answer = await client.post("https://api.example.com/v1/x?q=1", json={"a": 1},
                                   headers={"Authorization": "Bearer k"})
        return {"text": answer.text, "kept": answer.headers.get("x-kept"),
                "encoding": answer.headers.get("content-encoding")}

    done, fetch = _through(handler, call)
    assert done.result == {"text": "plain text", "kept": "yes", "encoding": None}
    [sent] = fetch.requests
    assert (sent.method, sent.url, sent.body) == ("POST", "https://api.example.com/v1/x?q=1",
                                                   b'{"a":1}')
    assert sent.headers["authorization"] == "Bearer k"
    assert not {"host", "accept-encoding", "content-length"} & set(sent.headers)


def test_a_body_iterated_again_goes_on_where_it_stopped() -> None:
    def handler(request: FetchRequest) -> FakeAnswer:
        return FakeAnswer(200, {}, [b"one", b"two", b"three"])

    async def call(client: httpx2.AsyncClient) -> Any:
        async with client.stream("GET", "https://api.example.com/s") as answer:
            stream: Any = answer.stream
            first = [chunk async for chunk in _take(stream, 1)]
            rest = [chunk async for chunk in stream]
        return [c.decode() for c in first + rest]

    done, _ = _through(handler, call)
    assert done.result == ["one", "two", "three"]


def test_a_port_timeout_is_httpx2s_read_timeout() -> None:
    async def silent() -> AsyncIterator[bytes]:
        await asyncio.Event().wait()
        yield b""

    def handler(request: FetchRequest) -> FakeAnswer:
        return FakeAnswer(200, {}, silent())

    async def call(client: httpx2.AsyncClient) -> Any:
        try:
            answer = await client.get("https://api.example.com/slow")
        except httpx2.ReadTimeout as error:
            return type(error.__cause__).__name__
        return answer.text

    done, _ = _through(handler, call)
    assert done.result == "HttpTimeout"


def test_outside_a_durable_run_nothing_is_sent() -> None:
    client = httpx2.AsyncClient(transport=TurnTransport())
    with pytest.raises(ValidationFailed, match="run_durably"):
        asyncio.run(client.get("https://api.example.com/"))


def test_a_timeout_out_of_bounds_is_refused() -> None:
    for bad in (0, -1, 601, True):
        with pytest.raises(ValueError, match="timeout"):
            TurnTransport(timeout=bad)


async def _take(stream: Any, count: int) -> AsyncIterator[bytes]:
    async for chunk in stream:
        yield chunk
        count -= 1
        if not count:
            return
