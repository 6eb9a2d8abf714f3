"""The one port through which threadline makes outbound HTTP requests.

Under workerd the Worker's own ``fetch`` implements it (:mod:`threadline.worker`); under CPython
:class:`HttpxPort` does, with httpx imported only when the first request is made, so importing
threadline never pulls it in. Tests pass a fake or point either port at a local server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


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
    and is treated like a timeout by callers: transient, retried with backoff.
    """

    async def post(
        self, url: str, *, headers: Mapping[str, str], body: bytes, timeout_ms: int
    ) -> OutboundResponse: ...


__all__ = ["HttpPort", "OutboundResponse", "OutboundTimeout"]
