"""The outbound HTTP port in its general form: any method, an answer read as it arrives.

An agent's ``turn.http`` (:mod:`threadline.threads.turn_http`) reaches the outside world through
a :class:`FetchPort`: under workerd the ``workers`` SDK's ``fetch`` (:mod:`threadline.worker`),
under CPython httpx (:class:`threadline.delivery.outbound.HttpxPort`), in tests a fake
(:class:`threadline.testing.FakeFetch`). A port opens one exchange and hands back its status
and headers as soon as they arrive; the body follows chunk by chunk, so a provider's streamed
answer can be read while it is still being written. Deadlines are the caller's: the port only
has to abort the request when the wait for it is cancelled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

#: What a Retry-After of more than 12 digits of seconds is read as (about 31,700 years): a
#: wait longer than any ceiling, without int() reading thousands of digits.
_FAR_MS = 10**15


class OutboundTimeout(Exception):
    """The destination did not answer within the allowance; the request may have arrived."""


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """One outbound request: method (upper case), absolute URL, headers and body bytes."""

    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    #: The caller's allowance for the answer's headers; a port may use it to bound its own
    #: waits, and must abort the request when the caller's wait is cancelled.
    timeout_ms: int = 30_000


class FetchAnswer(Protocol):
    """An answer whose status and headers (names lower-cased) have arrived; its body has not.

    ``chunks()`` yields the body's bytes as they arrive (each chunk non-empty) and ends with
    the body; ``aclose()`` gives up whatever is left unread and may be called more than once.
    """

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class FetchPort(Protocol):
    """Opens one exchange: returns once the answer's headers are in, or raises.

    :class:`OutboundTimeout` means no answer came in time; any other exception means the
    request failed before an answer (DNS, a refused connection, a reset). Redirects are not
    followed: a 3xx comes back as the answer.
    """

    async def open(self, request: FetchRequest) -> FetchAnswer: ...


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what an error may say about a destination."""
    # Only scheme and host are ever named in an error: a URL's path or query may be a
    # credential of its own (incoming-webhook URLs and signed links often are).
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{parts.hostname or ''}" + (f":{port}" if port else "")


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


__all__ = [
    "FetchAnswer",
    "FetchPort",
    "FetchRequest",
    "OutboundTimeout",
    "origin",
    "retry_after_ms",
]
