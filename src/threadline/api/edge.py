"""What the Worker checks before a request reaches a space's object.

Pure functions, so the same checks run under the simulated object and in workerd: the bearer
token (constant-time), the path ids, and the body size cap.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass

from threadline.api.http import Response
from threadline.api.problems import problem

#: Ids of spaces, threads and submissions in paths.
ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
HEALTH_PATH = "/v1/health"
#: The object that answers health checks through the Worker.
HEALTH_OBJECT = "threadline:health"
_SPACE_PATH = re.compile(r"^/v1/spaces/([^/]*)(?:/.*)?$")


@dataclass(frozen=True, slots=True)
class EdgeDecision:
    """Either a response to return at once, or the object name to forward to."""

    response: Response | None = None
    object_name: str | None = None


def token_matches(authorization: str | None, secret: str | None) -> bool:
    """True if ``authorization`` is ``Bearer <secret>``; compared in constant time.

    A deployment without a secret accepts no token at all.
    """
    if not secret or not authorization:
        return False
    scheme, _, supplied = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(supplied.strip().encode(), secret.encode())


def decide(
    method: str,
    path: str,
    authorization: str | None,
    secret: str | None,
    content_length: int | None,
    max_body_bytes: int,
) -> EdgeDecision:
    """Check one request at the edge and say where it goes."""
    if path == HEALTH_PATH and method in ("GET", "HEAD"):
        return EdgeDecision(object_name=HEALTH_OBJECT)
    if not token_matches(authorization, secret):
        return EdgeDecision(
            response=problem(401, "unauthorized", "Unauthorized"),
        )
    match = _SPACE_PATH.match(path)
    if match is None:
        return EdgeDecision(response=problem(404, "not-found", "Not found", f"no route for {path}"))
    for segment in path.split("/")[3:]:
        if segment and not ID_PATTERN.fullmatch(segment):
            return EdgeDecision(
                response=problem(
                    400,
                    "validation",
                    "Invalid request",
                    "path ids must match [A-Za-z0-9._:-]{1,128}",
                )
            )
    if not match.group(1):
        return EdgeDecision(
            response=problem(400, "validation", "Invalid request", "the space id is empty")
        )
    if content_length is not None and content_length > max_body_bytes:
        return EdgeDecision(response=body_too_large(max_body_bytes))
    return EdgeDecision(object_name=match.group(1))


def body_too_large(max_body_bytes: int) -> Response:
    """413 for a body above the cap."""
    detail = f"bodies are capped at {max_body_bytes} bytes"
    return problem(413, "payload-too-large", "Payload too large", detail)


__all__ = [
    "HEALTH_OBJECT",
    "HEALTH_PATH",
    "ID_PATTERN",
    "EdgeDecision",
    "body_too_large",
    "decide",
    "token_matches",
]
