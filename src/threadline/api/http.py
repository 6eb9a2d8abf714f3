"""A small, platform-neutral HTTP request/response pair that the routes work on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel


@dataclass(frozen=True, slots=True)
class Request:
    """An HTTP request as the routes see it: header names are lower-case."""

    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @classmethod
    def from_url(
        cls, method: str, url: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> Request:
        """Build a request from a full or path-only URL."""
        parts = urlsplit(url)
        return cls(
            method=method.upper(),
            path=parts.path or "/",
            query=parse_qs(parts.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in (headers or {}).items()},
            body=body,
        )

    def header(self, name: str) -> str | None:
        """A header's value, or None."""
        return self.headers.get(name.lower())


@dataclass(frozen=True, slots=True)
class Response:
    """An HTTP response: status, headers and a byte body, or a streamed body.

    ``stream``, when set, replaces ``body``: an async iterator of byte chunks that the platform
    sends as they come, without buffering (an event stream never ends on its own). Whoever
    stops consuming it early closes it (``aclose``), which runs its clean-up.
    """

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


def json_response(
    status: int,
    payload: Any,
    *,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Response:
    """A JSON response with compact, stable encoding."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    return Response(status, {"content-type": content_type, **(headers or {})}, body.encode())


def plain(value: Any) -> Any:
    """``value`` with every model turned into a dict: JSON-ready for ``json.dumps``.

    The response models hold only JSON types, so this equals ``model_dump(mode="json")``, but
    it leaves JSON values (inputs, results, record bodies) as they are: pydantic's serializer
    refuses values nested deeper than about 250 levels, which stored JSON may be.
    """
    if isinstance(value, BaseModel):
        return {name: plain(item) for name, item in value}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def model_response(
    status: int, model: BaseModel, *, headers: dict[str, str] | None = None
) -> Response:
    """A JSON response whose body is ``model`` (as documented by the OpenAPI schema)."""
    return json_response(status, plain(model), headers=headers)


__all__ = ["Request", "Response", "json_response", "model_response", "plain"]
