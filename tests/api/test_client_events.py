"""``Client.events`` / ``AsyncClient.events``: resuming iterators over the event stream.

Connections are cut on purpose (the transport raises a read error mid-stream); the client must
reopen with ``Last-Event-ID`` and hand out every record once, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from api_support import Api, make_api, run
from sse_support import drive, soon, submit, turns

from threadline import Application, ManualClock, Turn, ValidationFailed
from threadline.api import edge
from threadline.api.http import Request, Response
from threadline.client import AsyncClient, Client, ThreadEvent

TOKEN = "client-test-token-" + "c" * 32
BASE = "http://threadline.test"


def _chatty(app: Application) -> None:
    @app.agent("chatty")
    async def chatty(turn: Turn) -> Any:
        for index in range(int(turn.input["count"])):
            await turn.emit({"n": index})
        return None


@pytest.fixture
def chat(clock: ManualClock) -> Api:
    return make_api(clock, _chatty)


async def _answer(api: Api, request: httpx.Request) -> Response:
    checks = edge.Edge(
        edge.EdgeConfig(api_token=TOKEN, max_body_bytes=api.app.config.max_body_bytes), api.clock)
    plain = Request.from_url(request.method, str(request.url), dict(request.headers),
                             request.content)
    return await checks.serve(plain, lambda name, forwarded: api.space.handle(forwarded))


class _Cut(httpx.AsyncByteStream):
    """The object's stream, lost (a read error) after ``events`` events."""

    def __init__(self, chunks: AsyncIterator[bytes], events: int | None) -> None:
        self.chunks = chunks
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sent = 0
        async for chunk in self.chunks:
            if self.events is not None and sent == self.events:
                raise httpx.ReadError("connection lost")
            sent += chunk.count(b"\n\n")
            yield chunk

    async def aclose(self) -> None:
        await self.chunks.aclose()  # type: ignore[attr-defined]


def _records(events: list[ThreadEvent]) -> list[int]:
    return [e.seq for e in events if e.kind == "record" and e.seq is not None]


def test_the_async_client_resumes_after_a_lost_connection(chat: Api) -> None:
    seen_headers: list[str | None] = []
    cuts = [2]  # the first connection is lost after two events
    slept: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        reply = await _answer(chat, request)
        if reply.stream is None:
            return httpx.Response(reply.status, headers=reply.headers, content=reply.body)
        seen_headers.append(request.headers.get("last-event-id"))
        cut = cuts.pop(0) if cuts else None
        return httpx.Response(reply.status, headers=reply.headers, stream=_Cut(reply.stream, cut))

    async def nap(seconds: float) -> None:
        slept.append(seconds)

    async def go() -> None:
        client = AsyncClient(BASE, TOKEN, transport=httpx.MockTransport(handler), sleep=nap)
        await submit(chat, "t1", {"count": 3}, agent="chatty")
        await drive(chat)
        events = client.events("acme", "t1", reconnect_delay=0.5)
        got = [await soon(anext(events)) for _ in range(4)]
        # The three records, then the submission's settlement record.
        assert _records(got) == [1, 2, 3, 4]
        assert got[-1].record().kind == "submission.settled"
        assert seen_headers == [None, "2"] and slept == [0.5]
        assert got[0].record().body == {"n": 0}
        # Live records on the resumed connection.
        await submit(chat, "t1", {"count": 2}, agent="chatty")
        more: list[ThreadEvent] = []
        reading = asyncio.ensure_future(anext(events))
        await turns()
        await drive(chat)
        more.append(await soon(reading))
        # The second submission's two records and its settlement.
        while len(_records(more)) < 3:
            more.append(await soon(anext(events)))
        assert _records(got + more) == [1, 2, 3, 4, 5, 6, 7]
        assert [e.record().kind for e in more if e.kind == "record"] == [
            "record", "record", "submission.settled"]
        states = [e for e in more if e.kind == "submission"]
        assert states and states[0].seq is None and states[0].data["state"] == "queued"
        assert len(chat.space.api.subscribers) == 1
        await events.aclose()  # type: ignore[attr-defined]
        await turns()
        assert len(chat.space.api.subscribers) == 0
        await client.aclose()

    run(go())


def test_the_async_client_follows_a_thread_from_before_its_first_submission(
    chat: Api,
) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        reply = await _answer(chat, request)
        if reply.stream is None:
            return httpx.Response(reply.status, headers=reply.headers, content=reply.body)
        return httpx.Response(reply.status, headers=reply.headers, stream=_Cut(reply.stream, None))

    async def go() -> None:
        client = AsyncClient(BASE, TOKEN, transport=httpx.MockTransport(handler))
        events = client.events("acme", "fresh")
        # The first read opens the stream and waits: nothing was ever admitted to "fresh".
        reading = asyncio.ensure_future(anext(events))
        await turns()
        assert not reading.done()
        assert len(chat.space.api.subscribers) == 1
        first = await submit(chat, "fresh", {"count": 2}, agent="chatty")
        admitted = await soon(reading)
        assert admitted.kind == "submission" and admitted.data["id"] == first["id"]
        assert admitted.data["state"] == "queued"
        await drive(chat)
        more = [await soon(anext(events))]
        while len(_records(more)) < 2:
            more.append(await soon(anext(events)))
        assert _records(more) == [1, 2]
        assert [e.record().body for e in more if e.kind == "record"] == [{"n": 0}, {"n": 1}]
        await events.aclose()  # type: ignore[attr-defined]
        await turns()
        assert len(chat.space.api.subscribers) == 0
        await client.aclose()

    run(go())


def _snapshot(api: Api, request: httpx.Request, keep: int) -> tuple[Response, bytes]:
    """The object's answer, with the events available now as bytes (minus the last ``keep``)."""

    async def go() -> tuple[Response, bytes]:
        reply = await _answer(api, request)
        if reply.stream is None:
            return reply, reply.body
        data = b""
        while True:
            task = asyncio.ensure_future(anext(reply.stream))
            await turns()
            if not task.done():
                task.cancel()
                await turns()
                break
            data += task.result()
        await reply.stream.aclose()  # type: ignore[attr-defined]
        return reply, data[: len(data) - keep]

    result: tuple[Response, bytes] = asyncio.run(go())
    return result


class _Lost(httpx.SyncByteStream):
    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        raise httpx.ReadError("connection lost")


def test_the_blocking_client_resumes_and_never_repeats_a_record(chat: Api) -> None:
    seen_headers: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        # Each connection delivers what exists and is lost; the first inside its last event.
        reply, data = _snapshot(chat, request, keep=0 if seen_headers else 5)
        if reply.status >= 400 or not request.url.path.endswith("/events"):
            return httpx.Response(reply.status, headers=reply.headers, content=data)
        seen_headers.append(request.headers.get("last-event-id"))
        return httpx.Response(reply.status, headers=reply.headers, stream=_Lost(data))

    run(submit(chat, "t1", {"count": 4}, agent="chatty"))
    chat.drive()
    with Client(BASE, TOKEN, transport=httpx.MockTransport(handler), sleep=lambda _: None) as cl:
        events = cl.events("acme", "t1", after=1)
        got = [next(events) for _ in range(4)]
        events.close()  # type: ignore[attr-defined]
    # Connection 1 sends 2, 3, 4 and part of 5 (the settlement); connection 2 resumes after 4.
    assert _records(got) == [2, 3, 4, 5]
    assert got[-1].record().kind == "submission.settled"
    assert seen_headers == ["1", "4"]


def test_the_blocking_client_follows_a_thread_from_before_its_first_submission(
    chat: Api,
) -> None:
    seen_headers: list[str | None] = []
    submitted: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        reply, data = _snapshot(chat, request, keep=0)
        if reply.status >= 400 or not request.url.path.endswith("/events"):
            return httpx.Response(reply.status, headers=reply.headers, content=data)
        seen_headers.append(request.headers.get("last-event-id"))
        return httpx.Response(reply.status, headers=reply.headers, stream=_Lost(data))

    def first_submission(_: float) -> None:
        # While the client is between connections, the Thread's first submission runs.
        if not submitted:
            submitted.append(run(submit(chat, "fresh", {"count": 2}, agent="chatty"))["id"])
            chat.drive()

    with Client(BASE, TOKEN, transport=httpx.MockTransport(handler),
                sleep=first_submission) as cl:
        events = cl.events("acme", "fresh")
        got = [next(events) for _ in range(2)]
        events.close()  # type: ignore[attr-defined]
    # The first connection opened on a Thread with nothing admitted and sent nothing.
    assert seen_headers == [None, None]
    assert _records(got) == [1, 2]
    assert {e.record().submission_id for e in got} == set(submitted)


def test_refusals_raise_and_reconnects_are_bounded(chat: Api) -> None:
    attempts: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/t9/events"):
            attempts.append(1)
            raise httpx.ConnectError("refused")
        reply, data = _snapshot(chat, request, keep=0)
        return httpx.Response(reply.status, headers=reply.headers, content=data)

    with Client(BASE, TOKEN, transport=httpx.MockTransport(handler), sleep=lambda _: None) as cl:
        with pytest.raises(ValidationFailed):
            next(cl.events("acme", "nope", after=1))
        with pytest.raises(httpx.ConnectError):
            next(cl.events("acme", "t9", max_reconnects=3))
    assert len(attempts) == 4
