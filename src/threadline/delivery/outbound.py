"""The ports through which threadline reaches outside its object: HTTP and Queue producers.

Under workerd the Worker's own ``fetch`` implements :class:`HttpPort` (:mod:`threadline.worker`);
under CPython :class:`HttpxPort` does, with httpx imported only when the first request is made,
so importing threadline never pulls it in. Tests pass a fake or point either port at a local
server.

A Cloudflare Queue is reached through a :class:`QueueProducer` found in the Worker's
environment by :func:`queue_producer`: in workerd the environment the Worker hands to delivery
adapts its Queue bindings (the JavaScript call stays in :mod:`threadline.worker`); under CPython
a test puts a Python producer under the binding's name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from threadline.threads.model import JsonValue

#: At most this much of a response body is read and kept: enough to explain a refusal, never
#: a large page held in memory or shown in ``/maintenance``.
RESPONSE_BODY_LIMIT = 4_096
#: What a Retry-After of more than 12 digits of seconds is read as (about 31,700 years): a
#: wait longer than any ceiling, without int() reading thousands of digits.
_FAR_MS = 10**15


class OutboundTimeout(Exception):
    """The destination did not answer within the allowance; the request may have arrived."""


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
    """:class:`HttpPort` over httpx, for CPython (tests, a local runtime).

    httpx is imported when the first request is made, so ``import threadline`` never needs it;
    install it with the ``client`` extra (or ``pip install httpx``). One client per request:
    delivery is a few requests per wave, and a pooled client would outlive the event loop of
    a test or a pass.
    """

    async def post(
        self, url: str, *, headers: Mapping[str, str], body: bytes, timeout_ms: int
    ) -> OutboundResponse:
        """POST ``body`` to ``url``; :class:`OutboundTimeout` once ``timeout_ms`` has passed."""
        try:
            import httpx
        except ImportError as error:  # pragma: no cover - httpx is a dev dependency here
            raise ImportError(
                "threadline's HttpxPort needs httpx: pip install 'threadline[client]'"
            ) from error
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


async def _exchange(
    client: Any, url: str, headers: Mapping[str, str], body: bytes
) -> OutboundResponse:
    async with client.stream("POST", url, headers=dict(headers), content=body) as response:
        kept = bytearray()
        async for chunk in response.aiter_raw():
            kept += chunk
            if len(kept) >= RESPONSE_BODY_LIMIT:
                break
        return OutboundResponse(
            status=response.status_code,
            headers={k.lower(): v for k, v in response.headers.items()},
            body=bytes(kept[:RESPONSE_BODY_LIMIT]),
        )


def retry_after_ms(value: str | None, now_ms: int) -> int | None:
    """The wait a ``Retry-After`` value asks for, in ms from ``now_ms`` (0 for a date already
    past), or None when it is absent or means nothing (a negative or fractional number, text
    that is no date): the caller then backs off as it would without it.

    Both forms of RFC 9110 are read: delay-seconds (``120``) and an HTTP date
    (``Tue, 14 Nov 2023 22:15:20 GMT``, or the obsolete RFC 850 and asctime forms).
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        return _FAR_MS if len(text) > 12 else int(text) * 1_000
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # asctime names no zone; HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    return max(0, int(when.timestamp() * 1_000) - now_ms)


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what an error may say about a destination."""
    # Only scheme and host are ever named in an error: a webhook URL's path or query may be a
    # credential of its own (incoming-webhook URLs often are).
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")


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
    "retry_after_ms",
]
