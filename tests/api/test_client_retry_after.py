"""``events()`` waits out a busy answer (429 / 503 with Retry-After), boundedly, then retries."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from api_support import Api, run
from sse_support import drive, soon, submit

from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.api.http import Request
from threadline.client import AsyncClient, Client
from threadline.client.event_stream import MAX_RETRY_AFTER_S
from threadline.errors import ApiError

BASE = "http://threadline.test"
TOKEN = "client-test-token-" + "c" * 32


def _record(seq: int) -> bytes:
    data = {"seq": seq, "record_id": f"r{seq}", "submission_id": "s1", "kind": "record",
            "body": {"n": seq}, "created_at": 1}
    return f"id: {seq}\nevent: record\ndata: {json.dumps(data)}\n\n".encode()


def _busy(status: int, retry_after: str | None) -> httpx.Response:
    headers = {"content-type": "application/problem+json"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    slug = "too-many-streams" if status == 429 else "streams-exhausted"
    body = {"type": f"urn:threadline:problem:{slug}", "title": "busy", "status": status}
    return httpx.Response(status, headers=headers, json=body)


def _stream(*seqs: int) -> httpx.Response:
    """A stream sending these records, then ending (a lost connection to the client)."""
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          content=b"".join(_record(seq) for seq in seqs))


class _Script:
    """Answers each request to the events route with the next scripted response."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.last_event_ids: list[str | None] = []
        self.slept: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.last_event_ids.append(request.headers.get("last-event-id"))
        return self.answers.pop(0)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def client(self) -> Client:
        return Client(BASE, TOKEN, transport=httpx.MockTransport(self), sleep=self.sleep)


def test_the_client_waits_out_retry_after_when_opening_and_reopening() -> None:
    script = _Script(
        _busy(503, "7"), _busy(429, "2"), _stream(1, 2),
        # The reopened stream meets a busy object too, then resumes after record 2.
        _busy(503, "5"), _stream(3),
    )
    with script.client() as client:
        events = client.events("acme", "t1", reconnect_delay=0.5)
        got = [next(events) for _ in range(3)]
        events.close()  # type: ignore[attr-defined]
    assert [event.seq for event in got] == [1, 2, 3]
    assert script.slept == [7, 2, 0.5, 5]
    assert script.last_event_ids == [None, None, None, "2", "2"]


def test_a_long_retry_after_is_waited_at_most_the_bound() -> None:
    script = _Script(_busy(503, "3600"), _busy(429, "Wed, 21 Oct 2015 07:28:00 GMT"),
                     _stream(1))
    with script.client() as client:
        events = client.events("acme", "t1")
        assert next(events).seq == 1
        events.close()  # type: ignore[attr-defined]
    # An HTTP date already past asks for no wait at all.
    assert script.slept == [MAX_RETRY_AFTER_S, 0.0]
    assert MAX_RETRY_AFTER_S == 60.0


def test_busy_answers_in_a_row_are_bounded_then_raise_the_problem() -> None:
    script = _Script(*[_busy(429, "1") for _ in range(4)])
    with script.client() as client, pytest.raises(ApiError) as raised:
        next(client.events("acme", "t1", max_busy_retries=2))
    assert raised.value.status == 429
    assert raised.value.extra["problem"]["type"] == "urn:threadline:problem:too-many-streams"
    assert script.slept == [1, 1] and len(script.answers) == 1


def test_the_busy_allowance_starts_again_after_an_accepted_connection() -> None:
    script = _Script(_busy(503, "1"), _stream(1), _busy(503, "1"), _stream(2))
    with script.client() as client:
        events = client.events("acme", "t1", max_busy_retries=1, reconnect_delay=0.25)
        assert [next(events).seq for _ in range(2)] == [1, 2]
        events.close()  # type: ignore[attr-defined]
    assert script.slept == [1, 0.25, 1]


@pytest.mark.parametrize("answer", [
    _busy(503, None),                                   # a 503 that gives no Retry-After
    _busy(429, "soon"),                                 # one the client cannot read
    httpx.Response(500, headers={"retry-after": "1"}),  # not a busy status
])
def test_a_refusal_that_is_not_a_readable_busy_answer_raises_at_once(
    answer: httpx.Response,
) -> None:
    script = _Script(answer, _stream(1))
    with script.client() as client, pytest.raises(ApiError) as raised:
        next(client.events("acme", "t1"))
    assert raised.value.status == answer.status_code
    assert script.slept == [] and len(script.answers) == 1


class _Relay(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        await self.chunks.aclose()  # type: ignore[attr-defined]


def test_the_async_client_waits_for_a_slot_of_a_full_object(clock: ManualClock) -> None:
    app = Application(RuntimeConfig(max_event_streams=1))

    @app.agent("quiet")
    async def quiet(turn: Turn) -> Any:
        return {"ok": True}

    api = Api(app, clock)
    statuses: list[int] = []
    slept: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        plain = Request.from_url(request.method, str(request.url), dict(request.headers))
        reply = await api.space.handle(plain)
        statuses.append(reply.status)
        if reply.stream is None:
            return httpx.Response(reply.status, headers=reply.headers, content=reply.body)
        return httpx.Response(reply.status, headers=reply.headers, stream=_Relay(reply.stream))

    async def go() -> None:
        await submit(api, "t1", None, agent="quiet")
        await drive(api)
        # Another client holds the object's one stream.
        held = await api.space.handle(
            Request.from_url("GET", api.thread_path("t1") + "/events"))
        assert held.stream is not None

        async def nap(seconds: float) -> None:
            slept.append(seconds)
            await held.stream.aclose()  # type: ignore[union-attr]

        client = AsyncClient(BASE, TOKEN, transport=httpx.MockTransport(handler), sleep=nap)
        events = client.events("acme", "t1")
        first = await soon(anext(events))
        assert first.record().kind == "submission.settled"
        assert statuses == [503, 200]
        # The object's Retry-After: one heartbeat interval (15 s by default).
        assert slept == [15]
        await events.aclose()  # type: ignore[attr-defined]
        await client.aclose()
        assert len(api.space.api.streams) == 0

    run(go())
