"""The ports through which threadline reaches outside its object: HTTP and Queue producers.

Under workerd the Worker's own ``fetch`` implements :class:`HttpPort` and the general
:class:`~threadline.fetching.FetchPort` agents use (:mod:`threadline.worker`); under CPython
:class:`HttpxPort` does both, with httpx imported only when the first request is made,
so importing threadline never pulls it in. Tests pass a fake or point either port at a local
server.

A Cloudflare Queue is reached through a :class:`QueueProducer` found in the Worker's
environment by :func:`queue_producer`: in workerd the environment the Worker hands to delivery
adapts its Queue bindings (the JavaScript call stays in :mod:`threadline.worker`); under CPython
a test puts a Python producer under the binding's name.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from threadline.fetching import (
    FetchAnswer,
    FetchRequest,
    OutboundTimeout,
    origin,
    retry_after_ms,
)
from threadline.threads.model import JsonValue

#: At most this much of a response body is read and kept: enough to explain a refusal, never
#: a large page held in memory or shown in ``/maintenance``.
RESPONSE_BODY_LIMIT = 4_096


@dataclass(frozen=True, slots=True)
class OutboundResponse:
    """What came back: the status, headers (lower-cased names) and up to a bounded body."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class HttpPort(Protocol):
    """Sends one POST and returns the response, or raises :class:`OutboundTimeout`.

    Any other exception means the request failed before a response (DNS, connection refused)
    and is treated like a timeout by callers: transient, retried with backoff. Redirects are
    not followed: a 3xx comes back as the response.
    """

    async def post(
        self, url: str, *, headers: Mapping[str, str], body: bytes, timeout_ms: int
    ) -> OutboundResponse: ...


class HttpxPort:
    """:class:`HttpPort` and :class:`~threadline.fetching.FetchPort` over httpx, for CPython
    (tests, a local runtime).

    httpx is imported when the first request is made, so ``import threadline`` never needs it;
    install it with the ``client`` extra (or ``pip install httpx``). One client per request:
    delivery is a few requests per wave, and a pooled client would outlive the event loop of
    a test or a pass.
    """

    async def post(
        self, url: str, *, headers: Mapping[str, str], body: bytes, timeout_ms: int
    ) -> OutboundResponse:
        """POST ``body`` to ``url``; :class:`OutboundTimeout` once ``timeout_ms`` has passed."""
        httpx = _httpx()
        seconds = max(timeout_ms, 1) / 1000
        try:
            # httpx bounds each phase; the whole exchange (a receiver trickling its answer
            # too) is bounded by the one allowance as well.
            async with asyncio.timeout(seconds), httpx.AsyncClient(
                timeout=httpx.Timeout(seconds), follow_redirects=False
            ) as client:
                return await _exchange(client, url, headers, body)
        except (TimeoutError, httpx.TimeoutException) as error:
            raise OutboundTimeout(
                f"no answer from {origin(url)} within {timeout_ms} ms") from error


    async def open(self, request: FetchRequest) -> FetchAnswer:
        """Send ``request``; return once the answer's headers are in (its body streams after).

        :class:`OutboundTimeout` when no answer came within ``request.timeout_ms``.
        """
        httpx = _httpx()
        seconds = max(request.timeout_ms, 1) / 1000
        client = httpx.AsyncClient(timeout=httpx.Timeout(seconds), follow_redirects=False)
        try:
            built = client.build_request(request.method, request.url,
                                         headers=dict(request.headers), content=request.body)
            response = await client.send(built, stream=True)
        except httpx.TimeoutException as error:
            await client.aclose()
            raise OutboundTimeout(
                f"no answer from {origin(request.url)} within {request.timeout_ms} ms"
            ) from error
        except BaseException:
            await client.aclose()
            raise
        return _HttpxAnswer(client, response)


class _HttpxAnswer:
    """An httpx response being streamed, and the client that owns its connection."""

    def __init__(self, client: Any, response: Any) -> None:
        self._client = client
        self._response = response
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = {
            key.lower(): value for key, value in response.headers.items()}

    async def chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.aiter_bytes():
            if chunk:
                yield chunk

    async def aclose(self) -> None:
        try:
            await self._response.aclose()
        finally:
            await self._client.aclose()


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as error:  # pragma: no cover - httpx is a dev dependency here
        raise ImportError(
            "threadline's HttpxPort needs httpx: pip install 'threadline[client]'"
        ) from error
    return httpx


async def _exchange(
    client: Any, url: str, headers: Mapping[str, str], body: bytes
) -> OutboundResponse:
    async with client.stream("POST", url, headers=dict(headers), content=body) as response:
        return OutboundResponse(
            status=response.status_code,
            headers={k.lower(): v for k, v in response.headers.items()},
            body=await read_prefix(response.aiter_raw(), RESPONSE_BODY_LIMIT),
        )


async def read_prefix(chunks: AsyncIterable[bytes], limit: int) -> bytes:
    """Up to ``limit`` bytes of a body arriving as ``chunks``; the rest is never read."""
    kept = bytearray()
    async for chunk in chunks:
        kept += chunk
        if len(kept) >= limit:
            break
    return bytes(kept[:limit])


@runtime_checkable
class QueueProducer(Protocol):
    """A Queue binding as delivery uses it: sends message bodies in one call.

    Each body is a JSON value; the whole call is refused (raises) or accepted. The platform's
    bounds (100 messages, 256 KB a call, 128 KB a message) are the caller's to respect. An
    exception that carries ``retry_after_ms`` (an int) asks for the batch that long later,
    as a webhook's ``Retry-After`` does (see
    :func:`threadline.delivery.subscribers.retry_after_of`).
    """

    async def send_batch(self, bodies: Sequence[JsonValue]) -> None: ...


@runtime_checkable
class QueueEnvironment(Protocol):
    """An environment that adapts its own Queue bindings (the Worker's, in workerd)."""

    def queue_producer(self, binding: str) -> QueueProducer | None: ...


def env_value(env: Any, name: str) -> Any:
    """``name`` in a Worker's environment: a mapping's item or an object's attribute, or None."""
    if env is None:
        return None
    if isinstance(env, Mapping):
        return env.get(name)
    return getattr(env, name, None)


def queue_producer(env: Any, binding: str) -> QueueProducer | None:
    """The producer for the Queue bound as ``binding`` in ``env``, or None if there is none."""
    if isinstance(env, QueueEnvironment):
        return env.queue_producer(binding)
    value = env_value(env, binding)
    return value if isinstance(value, QueueProducer) else None


__all__ = [
    "RESPONSE_BODY_LIMIT",
    "HttpPort",
    "HttpxPort",
    "OutboundResponse",
    "OutboundTimeout",
    "QueueEnvironment",
    "QueueProducer",
    "env_value",
    "origin",
    "queue_producer",
    "read_prefix",
    "retry_after_ms",
]
