"""``/v1/spaces/{space}/revocations``: revoke one leaked token, or a subject's earlier tokens,
without rotating the signing key (see :mod:`threadline.api.revocation_list`)."""

from __future__ import annotations

from threadline.api.body import read_body
from threadline.api.context import ApiContext
from threadline.api.http import Request, Response, model_response
from threadline.api.models import RevocationList, RevokeRequest
from threadline.api.problems import typed_problem
from threadline.api.submissions import request_subject


def revoked() -> Response:
    """401 for a revoked token: its holder learns it will not work again."""
    return typed_problem("unauthorized", "the token has been revoked",
                         headers={"www-authenticate":
                                  'Bearer realm="threadline", error="invalid_token"'})


async def revoke(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../revocations``: 201 with the revocation, in force for the next request."""
    wanted = read_body(request, RevokeRequest)
    made = ctx.revocations.revoke(wanted, request_subject(request))
    return model_response(201, made.view())


async def list_revocations(
    ctx: ApiContext, request: Request, params: dict[str, str]
) -> Response:
    """``GET .../revocations``: the revocations in force, oldest first."""
    return model_response(200, RevocationList(
        revocations=[row.view() for row in ctx.revocations.in_force()]))


__all__ = ["list_revocations", "revoke", "revoked"]
