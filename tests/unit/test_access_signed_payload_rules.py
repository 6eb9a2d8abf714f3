"""A payload that verifies is also well formed: a token signed with the right key but
carrying a malformed lineage, token id or stream share is refused, so nothing downstream (the
revocation check, the stream cap) ever sees one. Principals check their own fields, and a
stream share minted into a token is bounded."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from threadline import Principal, access
from threadline.access import MAX_LINEAGE, Capability, SigningKeys, TokenRejected

SECRET = "k1:" + "s" * 40
KEYS = SigningKeys.parse(SECRET)
NOW_S = 1_700_000_000


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed(**fields: Any) -> str:
    payload = {"jti": "tok1", "sp": "acme", "cap": ["read"], "iat": NOW_S, "exp": NOW_S + 60}
    payload.update(fields)
    payload = {k: v for k, v in payload.items() if v is not None}
    signed = f"{access.TOKEN_VERSION}.k1.{_b64(json.dumps(payload).encode())}"
    mac = hmac.new(KEYS.keys["k1"], signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{_b64(mac)}"


def _verify(token: str) -> access.Verified:
    return access.verify(token, KEYS, now_ms=NOW_S * 1000)


def test_a_well_formed_signed_payload_verifies_with_its_lineage() -> None:
    ancestors = [f"a{n}" for n in range(MAX_LINEAGE - 1)]
    verified = _verify(_signed(anc=ancestors, fiat=NOW_S - 5))
    assert verified.principal.token is not None
    assert verified.principal.token.ids == (*ancestors, "tok1")
    assert verified.principal.token.issued_at == NOW_S - 5


@pytest.mark.parametrize("fields", [
    {"anc": [f"a{n}" for n in range(MAX_LINEAGE)]},  # one ancestor too many
    {"anc": ["not an id"]},
    {"anc": [5]},
    {"anc": "a1"},
    {"anc": ["a1"], "jti": None},  # a lineage needs the token's own id
    {"fiat": "yesterday"},
    {"fiat": NOW_S + 1},  # a family issued after its member
    {"jti": 5},
    {"jti": "not an id"},
    {"sk": "share", "sub": "user:a"},  # a subject is its own share
    {"sk": 5},
    {"sk": ""},
    {"cap": []},
    {"exp": NOW_S},
    {"sp": None},
], ids=lambda fields: ",".join(f"{k}={v!r}"[:30] for k, v in fields.items()))
def test_a_signed_but_malformed_payload_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(TokenRejected) as refused:
        _verify(_signed(**fields))
    assert refused.value.reason == "malformed payload"


def test_a_principal_refuses_bad_ids_and_subjects() -> None:
    for bad in ({"thread": "bad id!", "space": "acme"}, {"space": "bad space!"},
                {"subject": " padded "}):
        with pytest.raises(ValueError):
            Principal(**bad)


def test_a_minter_with_an_expiry_never_covers_a_principal_without_one() -> None:
    minter = Principal(capabilities=frozenset({Capability.ADMIN}), space="acme",
                       expires_at=NOW_S + 60)
    assert not minter.covers(Principal(capabilities=frozenset({Capability.ADMIN}),
                                       space="acme"))
    assert minter.covers(Principal(capabilities=frozenset({Capability.ADMIN}), space="acme",
                                   expires_at=NOW_S + 60))


def test_a_stream_share_minted_into_a_token_is_bounded_printable_text() -> None:
    longest = "s" * access._MAX_STREAM_KEY
    token = access.mint(KEYS, space="acme", stream_key=longest, now_ms=NOW_S * 1000)
    assert _verify(token).principal.stream_key == longest
    for bad in (longest + "s", "line\nbreak"):
        with pytest.raises(ValueError, match="stream_key"):
            access.mint(KEYS, space="acme", stream_key=bad, now_ms=NOW_S * 1000)
