"""Scoped tokens: what ``threadline.access.mint`` signs and ``verify`` accepts."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from threadline import access
from threadline.access import Capability, SigningKeys, TokenRejected, mint, verify

NEW = "k2:" + "n" * 40
OLD = "k1:" + "o" * 40
KEYS = f"{NEW},{OLD}"
NOW = 1_800_000_000_000


def _token(**scope: object) -> str:
    fields: dict[str, object] = {"space": "acme", "now_ms": NOW}
    fields.update(scope)
    return mint(KEYS, **fields)  # type: ignore[arg-type]


def test_a_token_carries_its_scope_capabilities_subject_and_expiry() -> None:
    token = _token(thread="t1", capabilities=("read", "submit"), subject="user:42",
                   ttl=timedelta(minutes=5))
    verified = verify(token, KEYS, now_ms=NOW)
    principal = verified.principal
    assert (principal.space, principal.thread, principal.subject) == ("acme", "t1", "user:42")
    assert principal.capabilities == {Capability.READ, Capability.SUBMIT}
    assert verified.expires_at == NOW // 1000 + 300
    assert principal.stream_key == "subject:user:42"


def test_a_token_without_a_subject_is_its_own_principal_for_the_stream_cap() -> None:
    first = verify(_token(), KEYS, now_ms=NOW).principal
    second = verify(_token(thread="t2"), KEYS, now_ms=NOW).principal
    assert first.subject is None and first.stream_key and second.stream_key
    assert first.stream_key != second.stream_key


def test_the_default_token_reads_one_space_for_fifteen_minutes() -> None:
    verified = verify(_token(), KEYS, now_ms=NOW)
    assert verified.principal.capabilities == {Capability.READ}
    assert verified.principal.thread is None
    assert verified.expires_at - NOW // 1000 == 15 * 60


def test_an_expired_token_is_refused_past_the_skew_allowance() -> None:
    token = _token(ttl=timedelta(seconds=60))
    expiry_ms = NOW + 60_000
    assert verify(token, KEYS, now_ms=expiry_ms + 29_999).principal.space == "acme"
    with pytest.raises(TokenRejected) as refused:
        verify(token, KEYS, now_ms=expiry_ms + 30_000)
    assert refused.value.expired
    with pytest.raises(TokenRejected):
        verify(token, KEYS, now_ms=expiry_ms, skew=timedelta(0))


def test_a_token_issued_in_the_future_beyond_the_skew_is_refused() -> None:
    token = _token()
    assert verify(token, KEYS, now_ms=NOW - 30_000).principal.space == "acme"
    with pytest.raises(TokenRejected) as refused:
        verify(token, KEYS, now_ms=NOW - 31_000)
    assert not refused.value.expired


def test_tokens_minted_before_a_rotation_keep_working_until_the_old_key_is_removed() -> None:
    before = mint(OLD, space="acme", now_ms=NOW)
    after = mint(KEYS, space="acme", now_ms=NOW)
    assert before.split(".")[1] == "k1" and after.split(".")[1] == "k2"
    assert verify(before, KEYS, now_ms=NOW).principal.space == "acme"
    with pytest.raises(TokenRejected, match="unknown key"):
        verify(before, NEW, now_ms=NOW)


def _payload(token: str) -> dict[str, object]:
    body = token.split(".")[2]
    return dict(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))


def _with_payload(token: str, payload: dict[str, object]) -> str:
    version, key_id, _, signature = token.split(".")
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    return ".".join((version, key_id, body, signature))


@pytest.mark.parametrize("change", [
    {"sp": "other"}, {"th": "t2"}, {"cap": ["read", "admin"]}, {"exp": 9_999_999_999},
    {"sub": "admin"},
])
def test_a_tampered_payload_is_refused(change: dict[str, object]) -> None:
    token = _token(thread="t1", subject="user:42")
    with pytest.raises(TokenRejected, match="bad signature"):
        verify(_with_payload(token, {**_payload(token), **change}), KEYS, now_ms=NOW)


@pytest.mark.parametrize("cut", [1, 5, 43, 60])
def test_a_truncated_token_is_refused(cut: int) -> None:
    token = _token()
    with pytest.raises(TokenRejected):
        verify(token[:-cut], KEYS, now_ms=NOW)


@pytest.mark.parametrize("token", [
    "", "tl1", "tl1.k2", "tl1.k2.e30", "tl2.k2.e30.AAAA", "tl1.k2.e30.AAAA.extra",
    "tl1.k2.e30.not*base64", "tl1." + "x" * 3_000,
])
def test_malformed_tokens_are_refused(token: str) -> None:
    with pytest.raises(TokenRejected):
        verify(token, KEYS, now_ms=NOW)


def test_a_token_signed_with_another_secret_is_refused() -> None:
    forged = mint("k2:" + "f" * 40, space="acme", now_ms=NOW)
    with pytest.raises(TokenRejected, match="bad signature"):
        verify(forged, KEYS, now_ms=NOW)


def test_a_correctly_signed_payload_of_the_wrong_shape_is_refused() -> None:
    keys = SigningKeys.parse(KEYS)
    for payload in ({"sp": "acme", "cap": ["read"], "iat": 1, "exp": "2"},
                    {"sp": "acme", "cap": ["read"], "iat": 1.5, "exp": 3},
                    {"sp": "acme", "cap": ["read"], "iat": 1, "exp": 1},
                    {"sp": "acme", "cap": "read", "iat": 1, "exp": 2},
                    {"cap": ["read"], "iat": 1, "exp": 2},
                    {"sp": "acme", "cap": [], "iat": 1, "exp": 2},
                    {"sp": "a b", "cap": ["read"], "iat": 1, "exp": 2},
                    {"sp": "acme", "cap": ["root"], "iat": 1, "exp": 2},
                    [1, 2]):
        body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
        signed = f"tl1.k2.{body}"
        signature = access._b64(access._signature(keys.keys["k2"], signed))
        with pytest.raises(TokenRejected, match="malformed"):
            verify(f"{signed}.{signature}", keys, now_ms=1_000)


def test_signatures_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = access.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(access.hmac, "compare_digest", spy)
    token = _token()
    verify(token, KEYS, now_ms=NOW)
    with pytest.raises(TokenRejected):
        verify(token[:-2] + ("AA" if not token.endswith("AA") else "BB"), KEYS, now_ms=NOW)
    assert len(compared) == 2 and all(len(a) == len(b) == 32 for a, b in compared)


@pytest.mark.parametrize(("text", "message"), [
    ("", "holds no key"), ("k1", "must read"), ("bad id!:" + "x" * 40, "must read"),
    ("k1:tiny-secret", "shorter than 32"), ("k1:" + "x" * 40 + ",k1:" + "y" * 40, "twice"),
])
def test_malformed_signing_keys_are_refused_without_echoing_a_secret(
    text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        SigningKeys.parse(text)
    assert "x" * 32 not in str(refused.value) and "tiny" not in str(refused.value)


@pytest.mark.parametrize("arguments", [
    {"capabilities": ("read", "root")}, {"capabilities": ()}, {"capabilities": "read"},
    {"ttl": timedelta(0)}, {"ttl": timedelta(days=8)}, {"space": "a b"},
    {"thread": ".."}, {"subject": ""}, {"subject": "x" * 257}, {"subject": "bad\nline"},
])
def test_mint_refuses_bad_arguments(arguments: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        _token(**arguments)


def test_a_principal_covers_only_what_it_could_do_itself() -> None:
    admin = access.Principal(capabilities={"admin", "read"}, space="acme", thread="t1")
    assert admin.covers(access.Principal(capabilities={"admin", "read"}, space="acme",
                                         thread="t1"))
    assert not admin.covers(access.Principal(capabilities={"read"}, space="acme", thread="t2"))
    assert not admin.covers(access.Principal(capabilities={"submit"}, space="acme",
                                             thread="t1"))


def test_a_secret_may_contain_colons() -> None:
    keys = SigningKeys.parse("k1:" + "a:b" * 12)
    assert keys.keys["k1"] == ("a:b" * 12).encode()


def test_a_principal_reaches_only_its_space_thread_and_capabilities() -> None:
    reader = access.Principal(capabilities={"read"}, space="acme", thread="t1")
    assert reader.allows(Capability.READ, "acme", "t1")
    assert not reader.allows(Capability.READ, "acme", "t2")
    assert not reader.allows(Capability.READ, "acme", None)
    assert not reader.allows(Capability.READ, "other", "t1")
    assert not reader.allows(Capability.SUBMIT, "acme", "t1")
    assert access.OPERATOR.allows(Capability.ADMIN, "any", None)
    with pytest.raises(ValueError, match="name its space"):
        access.Principal(thread="t1")


def test_a_subject_with_surrounding_whitespace_is_refused_at_minting() -> None:
    # A header carries the subject to the object, and headers lose surrounding whitespace.
    with pytest.raises(ValueError, match="whitespace"):
        _token(subject=" user:42 ")


def test_the_longest_lifetime_and_token_length_are_inclusive_bounds() -> None:
    week = _token(ttl=access.MAX_TTL)
    assert verify(week, KEYS, now_ms=NOW).expires_at == NOW // 1000 + 7 * 24 * 3600
    padded = _token(subject="u" * 256, thread="t" * 128)
    assert len(padded) < access.MAX_TOKEN_LENGTH
    with pytest.raises(TokenRejected, match="not a threadline"):
        verify("x" * access.MAX_TOKEN_LENGTH, KEYS, now_ms=NOW)
    with pytest.raises(TokenRejected, match="too long"):
        verify("x" * (access.MAX_TOKEN_LENGTH + 1), KEYS, now_ms=NOW)
