"""A fake outbound port: every request an object makes answered by a function of the test's.

``SimulatedObject(app, http=FakeFetch(handler))`` hands each request an agent's ``turn.http``
(or a webhook) makes to ``handler``, which returns a :class:`FakeAnswer` (or raises, as a
failed connection would). An answer's body may be an async iterator the test writes, so a
streamed answer can arrive a chunk at a time on the test's clock.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from threadline.delivery.outbound import RESPONSE_BODY_LIMIT, OutboundResponse, read_prefix
from threadline.fetching import FetchRequest

Body = bytes | str | Iterable[bytes | str] | AsyncIterable[bytes | str]


@dataclass
class FakeAnswer:
    """What the fake answers: a status, headers and a body (bytes, text, or chunks of
    either, an async iterator among them). ``closed`` turns True once the caller gave up or
    finished the answer."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Body = b""
    closed: bool = False

    @classmethod
    def of_json(cls, value: Any, *, status: int = 200,
                headers: Mapping[str, str] | None = None) -> FakeAnswer:
        """An answer whose body is ``value`` as JSON."""
        return cls(status, {"content-type": "application/json", **(headers or {})},
                   json.dumps(value).encode())

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's chunks, as the port hands them over."""
        body = self.body
        if isinstance(body, (bytes, str)):
            parts: Any = [body]
        else:
            parts = body
        if isinstance(parts, AsyncIterable):
            async for part in parts:
                if part:
                    yield _bytes(part)
        else:
            for part in parts:
                if part:
                    yield _bytes(part)

    async def aclose(self) -> None:
        """Mark the answer given up (or done with)."""
        self.closed = True


Handler = Callable[[FetchRequest], "FakeAnswer | Awaitable[FakeAnswer]"]


class FakeFetch:
    """An outbound port (:class:`~threadline.fetching.FetchPort` for ``turn.http``,
    :class:`~threadline.delivery.outbound.HttpPort` for webhooks) answered by ``handler``.

    ``requests`` lists every request it was handed, in order, and ``answers`` what it
    answered, so a test can check what was sent and whether the caller closed an answer.
    """

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[FetchRequest] = []
        self.answers: list[FakeAnswer] = []

    async def open(self, request: FetchRequest) -> FakeAnswer:
        """Hand ``request`` to the handler; its answer, or what it raised."""
        self.requests.append(request)
        answer = self._handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        self.answers.append(answer)
        return answer

    async def post(
        self, url: str, *, headers: Mapping[str, str], body: bytes, timeout_ms: int
    ) -> OutboundResponse:
        """A webhook's POST through the same handler, its body read up to the bound."""
        answer = await self.open(FetchRequest("POST", url, dict(headers), body, timeout_ms))
        kept = await read_prefix(answer.chunks(), RESPONSE_BODY_LIMIT)
        await answer.aclose()
        return OutboundResponse(answer.status, {k.lower(): v for k, v in answer.headers.items()},
                                kept)


def _bytes(part: bytes | str) -> bytes:
    return part.encode() if isinstance(part, str) else bytes(part)


__all__ = ["FakeAnswer", "FakeFetch"]
