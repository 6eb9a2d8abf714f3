"""RFC 9457 problem details: every error answer is ``application/problem+json``.

Each kind of refusal has a stable ``type`` URN (``urn:threadline:problem:<slug>``) that clients
may switch on; ``title`` is a fixed human summary of the type and ``detail`` explains this
occurrence, naming the offending field where there is one (also given as ``field``).
"""

from __future__ import annotations

from typing import Any

from threadline.api.http import Response, json_response
from threadline.errors import ApiError, ValidationFailed

#: Problem types are URNs: stable identifiers that name no host.
PROBLEM_TYPE_BASE = "urn:threadline:problem:"
PROBLEM_CONTENT_TYPE = "application/problem+json"

#: Every problem type the API answers with: slug -> (status, title).
PROBLEM_TYPES: dict[str, tuple[int, str]] = {
    "invalid-json": (400, "Malformed JSON"),
    "invalid-id": (400, "Invalid identifier"),
    "invalid-header": (400, "Invalid header"),
    "unauthorized": (401, "Unauthorized"),
    "forbidden": (403, "Forbidden"),
    "not-found": (404, "Not found"),
    "method-not-allowed": (405, "Method not allowed"),
    "conflict": (409, "Conflict"),
    "payload-too-large": (413, "Payload too large"),
    "validation": (422, "Invalid request"),
    "too-many-streams": (429, "Too many event streams"),
    "internal": (500, "Internal error"),
    "auth-unconfigured": (503, "API token not configured"),
    "streams-exhausted": (503, "No event stream available"),
}


def problem(
    status: int, slug: str, title: str, detail: str | None = None, **extra: Any
) -> Response:
    """A problem response with a stable ``type`` URI built from ``slug``.

    ``headers`` in ``extra`` (a dict) become response headers, not problem members.
    """
    headers: dict[str, str] = extra.pop("headers", None) or {}
    payload: dict[str, Any] = {"type": PROBLEM_TYPE_BASE + slug, "title": title, "status": status}
    if detail:
        payload["detail"] = detail
    payload.update({k: v for k, v in extra.items() if v is not None})
    response = json_response(status, payload, content_type=PROBLEM_CONTENT_TYPE)
    response.headers.update(headers)
    return response


def typed_problem(slug: str, detail: str | None = None, **extra: Any) -> Response:
    """A problem of a catalogued type: status and title come from :data:`PROBLEM_TYPES`."""
    status, title = PROBLEM_TYPES[slug]
    return problem(status, slug, title, detail, **extra)


class MalformedJson(ValidationFailed):
    """The body is not JSON text (400)."""

    problem_slug = "invalid-json"
    title = "Malformed JSON"

    def __init__(self, message: str) -> None:
        super().__init__(message, field="body", status=400)


class InvalidId(ValidationFailed):
    """A path identifier is outside ``[A-Za-z0-9._:-]{1,128}`` or is ``.``/``..`` (400)."""

    problem_slug = "invalid-id"
    title = "Invalid identifier"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, field=field, status=400)


class InvalidHeader(ValidationFailed):
    """A request header has a value the route cannot use (400)."""

    problem_slug = "invalid-header"
    title = "Invalid header"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, field=field, status=400)


def problem_from_error(error: ApiError) -> Response:
    """The problem response for an :class:`ApiError`; its ``detail`` names the field."""
    slug = getattr(error, "problem_slug", None) or str(error.code)
    detail = error.message
    if error.field and error.field not in detail:
        detail = f"{error.field}: {detail}"
    return problem(error.status, slug, error.title, detail, field=error.field, **error.extra)


def not_found(path: str) -> Response:
    """404 for a route that does not exist."""
    return typed_problem("not-found", f"no route for {path}")


def method_not_allowed(method: str, allowed: list[str]) -> Response:
    """405 naming the methods the route accepts (also in ``Allow``)."""
    allow = ", ".join(allowed)
    return typed_problem(
        "method-not-allowed", f"{method} is not allowed here; use {allow}",
        headers={"allow": allow},
    )


def internal_error() -> Response:
    """500 without detail: the cause is logged, not shown."""
    return typed_problem("internal")


__all__ = [
    "PROBLEM_CONTENT_TYPE",
    "PROBLEM_TYPES",
    "PROBLEM_TYPE_BASE",
    "InvalidHeader",
    "InvalidId",
    "MalformedJson",
    "internal_error",
    "method_not_allowed",
    "not_found",
    "problem",
    "problem_from_error",
    "typed_problem",
]
