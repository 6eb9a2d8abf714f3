"""Reading a Thread's event stream in process: SSE parsing over ``Response.stream``.

Everything runs on one event loop (the stream's waits belong to it), so the helpers are async
and the runtime is driven in the same loop. Nothing waits on wall time: "nothing more arrives"
is checked by letting the loop run a bounded number of turns.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from api_support import Api

from threadline.api.http import Request, Response

T = TypeVar("T")


@dataclass(frozen=True)
class Event:
    """One SSE block: an event (with or without id) or a comment."""

    event: str | None
    id: int | None
    data: Any
    comment: str | None = None


def parse_block(block: bytes) -> Event:
    """One SSE block (without its blank line) as an :class:`Event`."""
    fields: dict[str, str] = {}
    comment = None
    for line in block.decode().split("\n"):
        if line.startswith(":"):
            comment = line[1:].strip()
            continue
        name, _, value = line.partition(":")
        fields[name] = value[1:] if value.startswith(" ") else value
    return Event(
        event=fields.get("event"),
        id=int(fields["id"]) if "id" in fields else None,
        data=json.loads(fields["data"]) if "data" in fields else None,
        comment=comment,
    )


#: Loop turns within which :func:`soon` expects its result: in process, an event already due,
#: or woken by a commit just made, arrives within a few.
READ_TURNS = 1_000


async def soon(awaitable: Awaitable[T]) -> T:
    """The result of ``awaitable``, expected within :data:`READ_TURNS` turns of the loop.

    For a read whose event is already on its way: one still missing by then fails the test
    there, rather than hanging it on a stream that waits (for a heartbeat the clock never
    reaches, say)."""
    task = asyncio.ensure_future(awaitable)
    for _ in range(READ_TURNS):
        if task.done():
            return task.result()
        await asyncio.sleep(0)
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task
    raise AssertionError(f"nothing within {READ_TURNS} loop turns: the stream is waiting")


class StreamReader:
    """Reads SSE blocks from a streamed response."""

    def __init__(self, response: Response) -> None:
        assert response.stream is not None, response
        self.stream: AsyncIterator[bytes] = response.stream
        self.buffer = b""

    async def next(self) -> Event:
        """The next event, already on its way (see :func:`soon`)."""
        return await soon(self.wait())

    async def wait(self) -> Event:
        """The next event, however long it takes (see :func:`pending`)."""
        while b"\n\n" not in self.buffer:
            self.buffer += await anext(self.stream)
        block, _, self.buffer = self.buffer.partition(b"\n\n")
        return parse_block(block)

    async def take(self, count: int) -> list[Event]:
        return [await self.next() for _ in range(count)]

    async def close(self) -> None:
        await self.stream.aclose()  # type: ignore[attr-defined]


async def turns(count: int = 50) -> None:
    """Let the loop run ``count`` times: pending wake-ups happen, nothing waits on a timer."""
    for _ in range(count):
        await asyncio.sleep(0)


async def pending(reader: StreamReader) -> asyncio.Task[Event]:
    """Start reading the next event and let the loop run; the task must still be waiting."""
    task = asyncio.ensure_future(reader.wait())
    await turns()
    return task  # type: ignore[return-value]


async def call(api: Api, method: str, path: str, body: Any = None,
               headers: dict[str, str] | None = None) -> Response:
    raw = b"" if body is None else json.dumps(body).encode()
    return await api.space.handle(Request.from_url(method, path, headers or {}, raw))


async def submit(api: Api, thread: str, input: Any, **fields: Any) -> dict[str, Any]:
    reply = await call(api, "POST", api.thread_path(thread) + "/submissions",
                       {"input": input, **fields})
    assert reply.status == 202, reply.body
    data: dict[str, Any] = reply.json()
    return data


async def drive(api: Api, rounds: int = 50) -> None:
    """Recovery and head Attempts of every Thread until nothing changes (as ``Api.drive``)."""
    runtime = api.space.runtime
    for _ in range(rounds):
        before = runtime.ledger.scan_nonterminal()
        for thread in sorted({item.thread_id for item in before}):
            runtime.run_recovery(thread)
            await runtime.process_thread_head(thread)
        if runtime.ledger.scan_nonterminal() == before:
            return
    raise AssertionError("the runtime did not quiesce")


async def open_stream(api: Api, thread: str, *, after: int | None = None,
                      last_event_id: str | None = None) -> StreamReader:
    path = api.thread_path(thread) + "/events" + ("" if after is None else f"?after={after}")
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    reply = await call(api, "GET", path, headers=headers)
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "text/event-stream"
    return StreamReader(reply)
