"""One token, one text: every part in its canonical encoding, every lifetime within the bound,
whoever signed it."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from threadline import access
from threadline.access import MAX_TTL, SigningKeys, TokenRejected, mint, verify

KEYS = "k1:" + "n" * 40
NOW = 1_800_000_000_000
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _signed(payload: Any) -> str:
    """A token over ``payload``, signed correctly with the key mint would use."""
    keys = SigningKeys.parse(KEYS)
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    signed = f"tl1.k1.{body}"
    return f"{signed}.{access._b64(access._signature(keys.keys['k1'], signed))}"


def _same_bytes_other_texts(part: str) -> list[str]:
    """Every other text of ``part`` that a lenient base64url decoder reads as its bytes."""
    spare_bits = (len(part) * 6) % 8
    last = _ALPHABET.index(part[-1])
    kept = last & ~((1 << spare_bits) - 1)
    return [part[:-1] + _ALPHABET[kept | low] for low in range(1 << spare_bits)
            if kept | low != last]


def test_one_signature_verifies_as_one_token_text() -> None:
    token = mint(KEYS, space="acme", now_ms=NOW)
    verify(token, KEYS, now_ms=NOW)
    head, signature = token.rsplit(".", 1)
    others = _same_bytes_other_texts(signature)
    assert len(others) == 3  # 32 bytes in 43 characters leave two bits unread
    for other in others:
        assert base64.urlsafe_b64decode(other + "=") == base64.urlsafe_b64decode(signature + "=")
        with pytest.raises(TokenRejected, match="signature is not base64url"):
            verify(f"{head}.{other}", KEYS, now_ms=NOW)


def test_a_payload_is_read_only_in_its_canonical_encoding() -> None:
    refused = 0
    for pad in range(4):  # one of these lengths leaves bits the decoder would not read
        payload = {"sp": "acme", "cap": ["read"], "iat": NOW // 1000, "exp": NOW // 1000 + 60,
                   "x": "p" * pad}
        token = _signed(payload)
        verify(token, KEYS, now_ms=NOW)
        _, _, body, _ = token.split(".")
        for other in _same_bytes_other_texts(body):
            keys = SigningKeys.parse(KEYS)
            signed = f"tl1.k1.{other}"
            resigned = f"{signed}.{access._b64(access._signature(keys.keys['k1'], signed))}"
            with pytest.raises(TokenRejected, match="malformed"):
                verify(resigned, KEYS, now_ms=NOW)
            refused += 1
    assert refused >= 3


def test_the_verifier_refuses_a_correctly_signed_lifetime_past_the_bound() -> None:
    issued = NOW // 1000
    ten_years = _signed({"sp": "acme", "cap": ["read"], "iat": issued,
                         "exp": issued + 10 * 365 * 24 * 3600})
    with pytest.raises(TokenRejected, match="malformed"):
        verify(ten_years, KEYS, now_ms=NOW)
    bound = int(MAX_TTL.total_seconds())
    at_the_bound = _signed({"sp": "acme", "cap": ["read"], "iat": issued, "exp": issued + bound})
    assert verify(at_the_bound, KEYS, now_ms=NOW).expires_at == issued + bound
    past = _signed({"sp": "acme", "cap": ["read"], "iat": issued, "exp": issued + bound + 1})
    with pytest.raises(TokenRejected):
        verify(past, KEYS, now_ms=NOW)


def test_tokens_minted_alike_are_different_tokens_with_their_own_ids() -> None:
    first, second = (mint(KEYS, space="acme", now_ms=NOW) for _ in range(2))
    assert first != second
    ids = {verify(t, KEYS, now_ms=NOW).token_id for t in (first, second)}
    assert len(ids) == 2 and None not in ids
    named = verify(mint(KEYS, space="acme", now_ms=NOW, token_id="tok-1"), KEYS, now_ms=NOW)
    assert named.token_id == "tok-1" and named.issued_at == NOW // 1000
    with pytest.raises(ValueError, match="token_id"):
        mint(KEYS, space="acme", now_ms=NOW, token_id="not an id")
