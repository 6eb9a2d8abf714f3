"""RFC 9457 problem details: every error answer is ``application/problem+json``."""

from __future__ import annotations

from typing import Any

from threadline.api.http import Response, json_response
from threadline.errors import ApiError

#: Problem types are URNs: stable identifiers that name no host.
PROBLEM_TYPE_BASE = "urn:threadline:problem:"
PROBLEM_CONTENT_TYPE = "application/problem+json"


def problem(
    status: int, slug: str, title: str, detail: str | None = None, **extra: Any
) -> Response:
    """A problem response with a stable ``type`` URI built from ``slug``."""
    payload: dict[str, Any] = {"type": PROBLEM_TYPE_BASE + slug, "title": title, "status": status}
    if detail:
        payload["detail"] = detail
    payload.update({k: v for k, v in extra.items() if v is not None})
    return json_response(status, payload, content_type=PROBLEM_CONTENT_TYPE)


def problem_from_error(error: ApiError) -> Response:
    """The problem response for an :class:`ApiError`."""
    return problem(
        error.status, str(error.code), error.title, error.message, field=error.field, **error.extra
    )


def not_found(path: str) -> Response:
    """404 for a route that does not exist."""
    return problem(404, "not-found", "Not found", f"no route for {path}")


__all__ = [
    "PROBLEM_CONTENT_TYPE",
    "PROBLEM_TYPE_BASE",
    "not_found",
    "problem",
    "problem_from_error",
]
