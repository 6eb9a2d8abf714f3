"""The object's routes over the platform-neutral :class:`Request`/:class:`Response` pair."""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadline.api.http import Request, Response, json_response
from threadline.api.problems import not_found, problem, problem_from_error
from threadline.errors import ApiError

if TYPE_CHECKING:
    from threadline.space import Space


async def route(space: Space, request: Request) -> Response:
    """Answer one request addressed to ``space``; API errors become problem responses."""
    try:
        if request.path == "/v1/health":
            if request.method not in ("GET", "HEAD"):
                return problem(405, "method-not-allowed", "Method not allowed")
            return json_response(200, {"status": "ok", "schema_version": space.schema_version})
        return not_found(request.path)
    except ApiError as error:
        return problem_from_error(error)


__all__ = ["route"]
