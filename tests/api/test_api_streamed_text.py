"""``turn.stream``: text reaches a Thread's event streams as it is written, one record at close.

The deltas are memory only (``event: stream``, no ``id:``): a reader sees them before the turn
settles, a reader that connects mid-stream gets the text so far, a try that fails abandons its
stream and the retry streams under a new id, so two tries' text never mixes. The log gets one
record per stream, committed with its step.
"""

from __future__ import annotations

import asyncio
from typing import Any

from api_support import Api, make_api, run
from sse_support import StreamReader, open_stream, soon, submit, turns

from threadline import Application, ManualClock, RetryPolicy, Turn
from threadline.threads.history import read_history


class Pen:
    """Hands the agent its deltas one at a time, when the test says."""

    def __init__(self) -> None:
        self.parts: asyncio.Queue[str | None] = asyncio.Queue()
        self.tries = 0

    async def write_all(self, stream: Any) -> None:
        while (part := await self.parts.get()) is not None:
            if part == "!fail":
                raise ConnectionError("the provider dropped the stream")
            if part == "!lost":
                # As when the Attempt is cancelled (timed out) or the object goes away.
                raise asyncio.CancelledError
            await stream.write(part)


def _writer(pen: Pen) -> Any:
    def extend(app: Application) -> None:
        @app.agent("writer")
        async def writer(turn: Turn) -> Any:
            async def answer() -> str:
                pen.tries += 1
                async with turn.stream(kind="message", meta={"model": "fake"}) as stream:
                    await pen.write_all(stream)
                return stream.text
            text = await turn.step("answer", answer, retry=RetryPolicy(max_attempts=2))
            return {"text": text}

    return extend


async def _streams(reader: StreamReader, count: int) -> list[dict[str, Any]]:
    """The next ``count`` stream events, skipping submission states."""
    seen: list[dict[str, Any]] = []
    while len(seen) < count:
        event = await reader.next()
        if event.event == "stream":
            seen.append(event.data)
    return seen


async def _text(reader: StreamReader) -> dict[str, Any]:
    """The next stream event with text in it."""
    while True:
        [event] = await _streams(reader, 1)
        if event.get("text"):
            return event


async def _record(reader: StreamReader) -> Any:
    while True:
        event = await reader.next()
        if event.event == "record":
            return event


def _start(api: Api) -> asyncio.Task[Any]:
    runtime = api.space.runtime
    return asyncio.ensure_future(runtime.process_thread_head("t"))


def test_deltas_arrive_before_the_turn_settles_and_one_record_holds_the_text(
    clock: ManualClock,
) -> None:
    pen = Pen()
    api = make_api(clock, _writer(pen))

    async def go() -> None:
        reader = await open_stream(api, "t")
        made = await submit(api, "t", {}, agent="writer")
        head = _start(api)
        [opened] = await _streams(reader, 1)
        assert opened["state"] == "open" and (opened["offset"], opened["text"]) == (0, "")
        assert opened["submission_id"] == made["id"] and opened["kind"] == "message"
        pen.parts.put_nowait("Hel")
        [first] = await _streams(reader, 1)
        assert (first["offset"], first["text"]) == (0, "Hel")
        pen.parts.put_nowait("lo ")
        pen.parts.put_nowait("world")
        await turns()
        # Two writes between two wakes of the connection go out as one event.
        [burst] = await _streams(reader, 1)
        assert (burst["offset"], burst["text"]) == (3, "lo world")
        assert not head.done()
        assert read_history(api.storage, "t") == []  # nothing stored per delta
        pen.parts.put_nowait(None)
        await head
        ending = [e for e in [await reader.next() for _ in range(3)] if e.event != "submission"]
        while len(ending) < 3:
            event = await reader.next()
            if event.event != "submission":
                ending.append(event)
        record = ending[0]
        assert record.event == "record" and record.data["kind"] == "message"
        assert record.data["body"] == {"text": "Hello world", "stream": opened["stream"],
                                       "model": "fake"}
        # The stream's end comes after its record, and names it.
        closed = next(e.data for e in ending if e.event == "stream")
        assert closed == {"stream": opened["stream"], "kind": "message",
                          "submission_id": made["id"], "state": "closed",
                          "seq": record.id, "length": 11}
        settled = next(e for e in ending if e.event == "record" and e is not record)
        assert settled.data["kind"] == "submission.settled"
        assert settled.data["body"]["result"] == {"text": "Hello world"}
        await reader.close()
        kinds = [row["kind"] for row in read_history(api.storage, "t")]
        assert kinds == ["message", "submission.settled"]

    run(go())


def test_a_reader_that_connects_mid_stream_gets_the_text_so_far_then_the_deltas(
    clock: ManualClock,
) -> None:
    pen = Pen()
    api = make_api(clock, _writer(pen))

    async def go() -> None:
        await submit(api, "t", {}, agent="writer")
        head = _start(api)
        pen.parts.put_nowait("one ")
        pen.parts.put_nowait("two ")
        await turns()
        late = await open_stream(api, "t")
        [caught_up] = await _streams(late, 1)
        assert (caught_up["state"], caught_up["offset"], caught_up["text"]) == (
            "open", 0, "one two ")
        pen.parts.put_nowait("three")
        [delta] = await _streams(late, 1)
        assert (delta["offset"], delta["text"]) == (8, "three")
        pen.parts.put_nowait(None)
        assert (await _record(late)).data["body"]["text"] == "one two three"
        await head
        await late.close()

    run(go())


def test_a_failed_try_abandons_its_stream_and_the_retry_never_mixes_with_it(
    clock: ManualClock,
) -> None:
    pen = Pen()
    api = make_api(clock, _writer(pen))

    async def go() -> None:
        reader = await open_stream(api, "t")
        await submit(api, "t", {}, agent="writer")
        head = _start(api)
        pen.parts.put_nowait("the first try's ")
        first = await _text(reader)
        pen.parts.put_nowait("!fail")
        after_failure = {e["stream"]: e for e in await _streams(reader, 2)}
        assert after_failure.pop(first["stream"]) == {
            "stream": first["stream"], "kind": "message", "submission_id": first["submission_id"],
            "state": "abandoned", "length": len("the first try's ")}
        [(retry_id, opened)] = after_failure.items()
        assert (opened["state"], opened["offset"], opened["text"]) == ("open", 0, "")
        pen.parts.put_nowait("the second")
        second = await _text(reader)
        assert (second["stream"], second["offset"], second["text"]) == (retry_id, 0, "the second")
        pen.parts.put_nowait(None)
        await head
        settled = closed = None
        while settled is None or closed is None:
            event = await reader.next()
            if event.event == "stream":
                closed = event.data
            elif event.event == "record" and event.data["kind"] == "submission.settled":
                settled = event
        assert (closed["stream"], closed["state"]) == (retry_id, "closed")
        assert settled.data["body"]["result"] == {"text": "the second"}
        await reader.close()
        assert pen.tries == 2
        bodies = [row["body_json"] for row in read_history(api.storage, "t")]
        assert sum("the second" in body for body in bodies) == 2  # the record, the result
        assert not any("first try" in body for body in bodies)

    run(go())


def test_an_attempt_lost_mid_stream_abandons_the_stream(clock: ManualClock) -> None:
    pen = Pen()
    api = make_api(clock, _writer(pen))

    async def go() -> None:
        reader = await open_stream(api, "t")
        await submit(api, "t", {}, agent="writer")
        head = _start(api)
        pen.parts.put_nowait("half an answer")
        written = await _text(reader)
        pen.parts.put_nowait("!lost")
        [ended] = await _streams(reader, 1)
        assert ended["stream"] == written["stream"] and ended["state"] == "abandoned"
        await asyncio.gather(head, return_exceptions=True)
        await reader.close()
        assert [row["kind"] for row in read_history(api.storage, "t")] == []

    run(go())


def test_a_reader_of_another_thread_is_not_woken_by_a_delta(clock: ManualClock) -> None:
    pen = Pen()
    api = make_api(clock, _writer(pen))

    async def go() -> None:
        other = await open_stream(api, "quiet")
        await submit(api, "t", {}, agent="writer")
        waiting = asyncio.ensure_future(other.wait())
        await turns()
        head = _start(api)
        pen.parts.put_nowait("x" * 10)
        await turns()
        assert not waiting.done()
        pen.parts.put_nowait(None)
        await soon(head)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await other.close()

    run(go())


def test_the_python_client_folds_stream_events_into_the_text_so_far(
    clock: ManualClock,
) -> None:
    import httpx

    from threadline.api import edge
    from threadline.api.http import Request
    from threadline.client import AsyncClient, StreamedText

    token = "stream-test-token-" + "s" * 32
    pen = Pen()
    api = make_api(clock, _writer(pen))

    async def handler(request: httpx.Request) -> httpx.Response:
        checks = edge.Edge(edge.EdgeConfig(api_token=token, max_body_bytes=1 << 20), api.clock)
        plain = Request.from_url(request.method, str(request.url), dict(request.headers),
                                 request.content)
        reply = await checks.serve(plain, lambda name, forwarded: api.space.handle(forwarded))
        if reply.stream is None:
            return httpx.Response(reply.status, headers=reply.headers, content=reply.body)

        class Body(httpx.AsyncByteStream):
            async def __aiter__(self) -> Any:
                async for chunk in reply.stream:  # type: ignore[union-attr]
                    yield chunk

        return httpx.Response(reply.status, headers=reply.headers, stream=Body())

    async def go() -> None:
        client = AsyncClient("http://threadline.test", token,
                             transport=httpx.MockTransport(handler))
        events = client.events("acme", "t")
        folded = StreamedText()
        reading = asyncio.ensure_future(anext(events))
        await turns()
        await submit(api, "t", {}, agent="writer")
        head = _start(api)
        texts: list[str] = []

        async def next_text() -> str:
            nonlocal reading
            while True:
                event = await soon(reading)
                reading = asyncio.ensure_future(anext(events))
                text = folded.apply(event)
                if text:
                    return text

        pen.parts.put_nowait("Hel")
        texts.append(await next_text())
        pen.parts.put_nowait("lo")
        texts.append(await next_text())
        assert texts == ["Hel", "Hello"]
        assert list(folded.open.values()) == ["Hello"]
        pen.parts.put_nowait(None)
        await head
        while folded.open:
            folded.apply(await soon(reading))
            reading = asyncio.ensure_future(anext(events))
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await events.aclose()  # type: ignore[attr-defined]
        await client.aclose()

    run(go())


def test_a_commit_made_while_a_delta_wake_is_handled_is_not_left_unread(
    clock: ManualClock, monkeypatch: Any,
) -> None:
    from threadline.api.subscribers import Subscription

    pen = Pen()
    api = make_api(clock, _writer(pen))
    commit_next: list[bool] = []
    original = Subscription.wait_either

    async def racing(self: Subscription, revision: int, until_ms: int, other: Any) -> Any:
        woke = await original(self, revision, until_ms, other)
        if woke == (False, True) and commit_next:
            commit_next.clear()
            # A commit right after a wake by deltas alone, before the stream reads again.
            api.space.runtime.ledger.admit("t", "echo", {"text": "behind"})
        return woke

    monkeypatch.setattr(Subscription, "wait_either", racing)

    async def go() -> None:
        reader = await open_stream(api, "t")
        await submit(api, "t", {}, agent="writer")
        head = _start(api)
        pen.parts.put_nowait("a")
        await _text(reader)
        commit_next.append(True)
        pen.parts.put_nowait("b")
        seen: list[Any] = []
        while not any(e.event == "submission" and e.data["state"] == "queued" for e in seen):
            seen.append(await reader.next())
        pen.parts.put_nowait(None)
        await head
        await reader.close()

    run(go())
