"""``POST /v1/tokens``: a scoped token minted by the Worker, for a backend that does not link
the library.

The Worker answers it itself (it holds the signing keys; the space's object does not): a
principal may mint only what it could do itself, as itself, for no longer than it lasts
(seven days at most). A token minted by a principal with a subject carries that subject; one
minted without a subject counts its event streams against its minter's share.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from threadline.access import (
    MAX_LINEAGE,
    MAX_TTL,
    Capability,
    Principal,
    SigningKeys,
    mint,
    verify,
)
from threadline.api.body import read_body
from threadline.api.http import Request, Response, model_response
from threadline.api.models import ID_REGEX
from threadline.errors import Forbidden
from threadline.threads.model import RESERVED_SPACE_PREFIX, valid_subject

_Id = Annotated[str, Field(pattern=ID_REGEX, max_length=128)]
#: A capability's name (see :class:`threadline.access.Capability`).
CapabilityName = Literal["read", "submit", "decide", "abort", "admin"]
_READ_ONLY: list[CapabilityName] = ["read"]


class TokenRequest(BaseModel):
    """What to mint: the scope, the capabilities, the lifetime and the subject."""

    model_config = ConfigDict(strict=True, extra="forbid")

    space: _Id = Field(description="The space the token opens (only this one).")
    thread: _Id | None = Field(
        None, description="The one Thread it opens; null: every Thread of the space.")
    capabilities: list[CapabilityName] = Field(
        default_factory=lambda: _READ_ONLY.copy(), min_length=1, max_length=5,
        description="read, submit, decide, abort, admin.",
        json_schema_extra={"uniqueItems": True},
    )
    ttl_seconds: int = Field(
        900, ge=1, le=int(MAX_TTL.total_seconds()),
        description="Lifetime in seconds; cut to what is left of the minting token's own.")
    subject: str | None = Field(
        None, min_length=1, max_length=256,
        description="Who the holder is; recorded on what the token causes. Printable text"
                    " without surrounding whitespace. Credentials with a subject mint only"
                    " for their own; a scoped token without one mints only without one.")

    @field_validator("space", "thread")
    @classmethod
    def _not_a_dot_segment(cls, value: str | None) -> str | None:
        if value in (".", ".."):
            raise ValueError("must not be '.' or '..'")
        return value

    @field_validator("space")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.startswith(RESERVED_SPACE_PREFIX):
            raise ValueError(f"must not start with {RESERVED_SPACE_PREFIX!r}")
        return value

    @field_validator("subject")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not valid_subject(value):
            raise ValueError("must be printable text without surrounding whitespace")
        return value


class TokenGrant(BaseModel):
    """A minted token and what it opens."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(description="Send as `Authorization: Bearer <token>` (or, on the"
                                   " events route, as `?access_token=`). Never log it.")
    token_id: str = Field(description="The token's id: what revoking this one token names"
                                      " (`POST /v1/spaces/{space}/revocations`).")
    expires_at: int = Field(description="When it stops working, in epoch milliseconds.")
    space: str
    thread: str | None
    capabilities: list[CapabilityName]
    subject: str | None


def mint_for(principal: Principal, request: Request, keys: SigningKeys, now_ms: int) -> Response:
    """Mint what ``request``'s body asks for on behalf of ``principal``; 403 beyond its own
    reach (another space or Thread, a capability it lacks, another subject) or once it has
    expired. The lifetime is cut to what is left of ``principal``'s."""
    wanted = read_body(request, TokenRequest)
    issued = now_ms // 1000
    ttl = wanted.ttl_seconds
    if principal.expires_at is not None:
        left = principal.expires_at - issued
        if left <= 0:
            raise Forbidden("these credentials cannot grant that scope")
        ttl = min(ttl, left)
    requested = Principal(
        subject=wanted.subject, capabilities=frozenset(Capability(c) for c in wanted.capabilities),
        space=wanted.space, thread=wanted.thread, expires_at=issued + ttl,
    )
    if Capability.ADMIN not in principal.capabilities or not principal.covers(requested):
        raise Forbidden("these credentials cannot grant that scope")
    lineage = principal.token
    if lineage is not None and len(lineage.ids) >= MAX_LINEAGE:
        raise Forbidden(f"a token minted from {MAX_LINEAGE - 1} others in a row mints no more")
    token = mint(
        keys, space=wanted.space, thread=wanted.thread, capabilities=wanted.capabilities,
        ttl=timedelta(seconds=ttl), subject=wanted.subject, now_ms=now_ms,
        stream_key=principal.stream_key if wanted.subject is None else None, lineage=lineage,
    )
    verified = verify(token, keys, now_ms=now_ms)
    return model_response(201, TokenGrant(
        token=token, token_id=verified.token_id or "", expires_at=verified.expires_at * 1000,
        space=wanted.space,
        thread=wanted.thread, capabilities=sorted(c.value for c in requested.capabilities),
        subject=wanted.subject,
    ))


__all__ = ["TokenGrant", "TokenRequest", "mint_for"]
