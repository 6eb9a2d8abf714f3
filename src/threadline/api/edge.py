"""What the Worker checks before a request reaches a space's object.

Pure functions, so the same checks run under the simulated object and in workerd: the bearer
token (constant-time), the path ids, and the body size cap. Health and the OpenAPI document are
open; every other route needs the token, and a deployment without a configured token answers
503 on them (it never falls back to open access).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from threadline.api.http import Response
from threadline.api.problems import typed_problem
from threadline.api.router import DOT_SEGMENTS
from threadline.api.routes import HEALTH_PATH, OPENAPI_PATH

#: Ids of spaces, threads and submissions in paths.
ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: Paths answered without a token.
OPEN_PATHS = frozenset({HEALTH_PATH, OPENAPI_PATH})
#: The object that answers the open paths through the Worker.
HEALTH_OBJECT = "threadline:health"
#: The secret holding the API token.
TOKEN_SECRET = "THREADLINE_API_TOKEN"  # noqa: S105 - the name of the secret, not its value
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
    """Check one request at the edge and say where it goes.

    The order matters: open paths first; then a missing secret (503) before any token check,
    so a misconfigured deployment never reveals which routes exist; then the token (401, no
    detail); then the path ids (400) and the declared body size (413), before anything reads
    the body.
    """
    if path in OPEN_PATHS:
        return EdgeDecision(object_name=HEALTH_OBJECT)
    if not secret:
        return EdgeDecision(response=unconfigured())
    if not token_matches(authorization, secret):
        return EdgeDecision(response=unauthorized())
    match = _SPACE_PATH.match(path)
    if match is None:
        return EdgeDecision(response=typed_problem("not-found", f"no route for {path}"))
    for segment in path.split("/")[3:]:
        if segment and (not ID_PATTERN.fullmatch(segment) or segment in DOT_SEGMENTS):
            return EdgeDecision(
                response=typed_problem(
                    "invalid-id",
                    "path ids must match [A-Za-z0-9._:-]{1,128} and not be '.' or '..'",
                )
            )
    if not match.group(1):
        return EdgeDecision(response=typed_problem("invalid-id", "the space id is empty"))
    if content_length is not None and content_length > max_body_bytes:
        return EdgeDecision(response=body_too_large(max_body_bytes))
    return EdgeDecision(object_name=match.group(1))


def body_too_large(max_body_bytes: int) -> Response:
    """413 for a body above the cap."""
    return typed_problem(
        "payload-too-large", f"bodies are capped at {max_body_bytes} bytes", field="body"
    )


async def read_capped(
    next_chunk: Callable[[], Awaitable[bytes | None]], cap: int
) -> bytes | None:
    """Read a body chunk by chunk (``next_chunk`` returns None at its end).

    Returns None as soon as more than ``cap`` bytes arrived, without pulling another chunk: a
    body sent without a ``Content-Length`` (chunked) is refused without being buffered whole.
    """
    chunks: list[bytes] = []
    total = 0
    while (chunk := await next_chunk()) is not None:
        total += len(chunk)
        if total > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def unauthorized() -> Response:
    """401 that says nothing about what was wrong with the credentials."""
    return typed_problem("unauthorized", headers={"www-authenticate": "Bearer"})


def unconfigured() -> Response:
    """503: the deployment has no API token, so no authenticated route may answer."""
    return typed_problem(
        "auth-unconfigured",
        f"the {TOKEN_SECRET} secret is not set; set it (locally: in .dev.vars) to use the API",
    )


__all__ = [
    "HEALTH_OBJECT",
    "ID_PATTERN",
    "OPEN_PATHS",
    "TOKEN_SECRET",
    "EdgeDecision",
    "body_too_large",
    "decide",
    "read_capped",
    "token_matches",
    "unauthorized",
    "unconfigured",
]
