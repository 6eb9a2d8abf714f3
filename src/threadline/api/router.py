"""A tiny, framework-free router: path templates, methods, and the 404/405 rules.

A :class:`Route` also describes its operation (models, statuses, summary), so the OpenAPI
document is generated from the very table that routes requests.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from threadline.access import Capability
from threadline.api.context import ApiContext
from threadline.api.http import Request, Response
from threadline.api.problems import InvalidId
from threadline.threads.model import RESERVED_SPACE_PREFIX

_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: Path ids that a URL resolver would read as directory steps.
DOT_SEGMENTS = frozenset({".", ".."})

Handler = Callable[[ApiContext, Request, dict[str, str]], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Route:
    """One operation: ``method`` on ``template`` (``{name}`` marks a path id)."""

    method: str
    template: str
    handler: Handler
    operation_id: str
    summary: str
    #: status -> (response model or None for a free-form JSON object, description)
    responses: Mapping[int, tuple[type[BaseModel] | None, str]]
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    #: Problem statuses this operation may answer with, besides the ones every route has.
    problems: tuple[int, ...] = ()
    #: What a caller needs to use it (None: open to anyone, health and this document).
    capability: Capability | None = Capability.READ
    #: True if it also takes a scoped token as ``?access_token=`` (for ``EventSource``).
    query_token: bool = False
    #: True when its success responses carry a ``Location`` header.
    location: bool = False
    #: The media type of its success responses.
    media_type: str = "application/json"
    #: Request headers it reads, as (name, description) for the OpenAPI document.
    headers: tuple[tuple[str, str], ...] = ()
    #: A longer explanation for the OpenAPI document.
    description: str = ""
    segments: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", tuple(self.template.strip("/").split("/")))

    @property
    def authenticated(self) -> bool:
        """True unless the route is open to anyone."""
        return self.capability is not None

    @property
    def params(self) -> list[str]:
        """The names of the template's path ids, in order."""
        return [s[1:-1] for s in self.segments if s.startswith("{")]

    def match(self, parts: tuple[str, ...]) -> dict[str, str] | None:
        """The path ids if ``parts`` fits the template, else None (ids not yet validated)."""
        if len(parts) != len(self.segments):
            return None
        found: dict[str, str] = {}
        for want, got in zip(self.segments, parts, strict=True):
            if want.startswith("{"):
                if not got:
                    return None
                found[want[1:-1]] = got
            elif want != got:
                return None
        return found


def check_path_id(name: str, value: str) -> str:
    """Refuse a path id outside ``[A-Za-z0-9._:-]{1,128}``, and ``.``/``..``; a space id
    under the reserved ``threadline:`` prefix too."""
    if _ID.fullmatch(value) is None or value in DOT_SEGMENTS:
        raise InvalidId(
            f"{name} must match [A-Za-z0-9._:-]{{1,128}} and not be '.' or '..'", field=name
        )
    if name == "space" and value.startswith(RESERVED_SPACE_PREFIX):
        raise InvalidId(
            f"space may not start with {RESERVED_SPACE_PREFIX!r}: those spaces are"
            " threadline's own", field=name)
    return value


@dataclass(frozen=True, slots=True)
class Match:
    """The outcome of routing a path: a route and its ids, or the methods the path allows."""

    route: Route | None
    params: dict[str, str]
    allowed: list[str]


class Router:
    """Routes requests over a fixed table."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes

    def resolve(self, method: str, path: str) -> Match:
        """Find the route for ``method`` on ``path``; HEAD is served by a GET route."""
        # Strict: a trailing slash or an empty segment is another path, not this one.
        parts = tuple(path[1:].split("/")) if path.startswith("/") else ()
        allowed: list[str] = []
        for route in self.routes:
            params = route.match(parts)
            if params is None:
                continue
            methods = [route.method, "HEAD"] if route.method == "GET" else [route.method]
            allowed.extend(m for m in methods if m not in allowed)
            if method in methods:
                return Match(route, params, allowed)
        return Match(None, {}, allowed)


def routes_by_template(routes: list[Route]) -> dict[str, list[Route]]:
    """The routes grouped by template, in table order (for the OpenAPI paths object)."""
    grouped: dict[str, list[Route]] = {}
    for route in routes:
        grouped.setdefault(route.template, []).append(route)
    return grouped


def free_form() -> dict[str, Any]:
    """The schema of a response that is any JSON object."""
    return {"type": "object"}


__all__ = [
    "DOT_SEGMENTS",
    "Handler",
    "Match",
    "Route",
    "Router",
    "check_path_id",
    "free_form",
    "routes_by_template",
]
