"""Threadline-Signature: how a webhook request is signed and how a receiver verifies it."""

from __future__ import annotations

import hashlib
import hmac

import pytest

import threadline
from threadline import SignatureInvalid, verify_signature
from threadline.delivery.webhooks import signature_header

BODY = b'{"space":"acme","subscriber":"crm","records":[]}'
SECRET = "whsec_test"
T = 1_700_000_000


def test_a_signed_body_verifies_and_returns_its_signed_time() -> None:
    header = signature_header(BODY, [SECRET], T)
    assert verify_signature(BODY, header, SECRET, now=T) == T


def test_the_signature_is_hex_hmac_sha256_of_time_dot_body() -> None:
    expected = hmac.new(SECRET.encode(), f"{T}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert signature_header(BODY, [SECRET], T) == f"t={T},v1={expected}"


def test_a_str_body_is_taken_as_its_utf8_bytes() -> None:
    body = '{"text":"héllo"}'
    header = signature_header(body.encode(), [SECRET], T)
    assert verify_signature(body, header, SECRET, now=T) == T


def test_a_signature_within_the_tolerance_either_way_verifies() -> None:
    header = signature_header(BODY, [SECRET], T)
    assert verify_signature(BODY, header, SECRET, now=T + 300) == T
    assert verify_signature(BODY, header, SECRET, now=T - 300) == T
    assert verify_signature(BODY, header, SECRET, tolerance=10, now=T + 10) == T


def test_an_expired_signature_is_refused() -> None:
    header = signature_header(BODY, [SECRET], T)
    with pytest.raises(SignatureInvalid, match="more than 300 s"):
        verify_signature(BODY, header, SECRET, now=T + 301)
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, SECRET, tolerance=10, now=T + 11)


def test_a_signature_from_too_far_in_the_future_is_refused() -> None:
    header = signature_header(BODY, [SECRET], T)
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, SECRET, now=T - 301)


def test_the_system_clock_is_used_when_now_is_not_given() -> None:
    header = signature_header(BODY, [SECRET], T)  # 2023: long expired today
    with pytest.raises(SignatureInvalid, match="more than"):
        verify_signature(BODY, header, SECRET)


def test_a_tampered_body_is_refused() -> None:
    header = signature_header(BODY, [SECRET], T)
    with pytest.raises(SignatureInvalid, match="no v1 signature matches"):
        verify_signature(BODY.replace(b"acme", b"acmf"), header, SECRET, now=T)


def test_a_changed_time_is_refused() -> None:
    header = signature_header(BODY, [SECRET], T).replace(f"t={T}", f"t={T + 1}")
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, SECRET, now=T)


def test_a_wrong_secret_is_refused() -> None:
    header = signature_header(BODY, [SECRET], T)
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, "whsec_other", now=T)


def test_a_header_signed_with_two_secrets_verifies_under_either() -> None:
    header = signature_header(BODY, ["new", "old"], T)
    assert header.count("v1=") == 2
    assert verify_signature(BODY, header, "new", now=T) == T
    assert verify_signature(BODY, header, "old", now=T) == T
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, "neither", now=T)


def test_a_receiver_rotating_its_secret_accepts_either_of_its_secrets() -> None:
    header = signature_header(BODY, ["old"], T)
    assert verify_signature(BODY, header, ["new", "old"], now=T) == T
    assert verify_signature(BODY, header, [b"old"], now=T) == T


@pytest.mark.parametrize("header", [
    None, "", "   ",
    "v1=abc",                       # no time
    f"t={T}",                       # no signature
    f"t={T},t={T},v1=abc",          # two times
    "t=12a,v1=abc",                 # not digits
    "t=-5,v1=abc",
    "t=\uff11\uff12,v1=abc",        # non-ASCII (fullwidth) digits
    f"t={T},v1",                    # an entry without =
])
def test_a_missing_or_malformed_header_is_refused(header: str | None) -> None:
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, SECRET, now=T)


def test_spaces_and_unknown_schemes_in_the_header_are_tolerated() -> None:
    header = signature_header(BODY, [SECRET], T)
    t_part, v1_part = header.split(",")
    assert verify_signature(BODY, f" {t_part} , v0=dead , {v1_part} ", SECRET, now=T) == T


def test_a_non_ascii_signature_is_a_mismatch_not_a_crash() -> None:
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, f"t={T},v1=é", SECRET, now=T)


def test_an_empty_secret_or_negative_tolerance_is_a_programming_error() -> None:
    header = signature_header(BODY, [SECRET], T)
    with pytest.raises(ValueError):
        verify_signature(BODY, header, "", now=T)
    with pytest.raises(ValueError):
        verify_signature(BODY, header, [], now=T)
    with pytest.raises(ValueError):
        verify_signature(BODY, header, SECRET, tolerance=-1, now=T)


def test_verify_signature_and_its_error_are_exported() -> None:
    assert threadline.verify_signature is verify_signature
    assert issubclass(threadline.SignatureInvalid, threadline.ThreadlineError)


def test_a_zero_tolerance_accepts_the_signed_second_only() -> None:
    header = signature_header(BODY, [SECRET], T)
    assert verify_signature(BODY, header, SECRET, tolerance=0, now=T) == T
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, SECRET, tolerance=0, now=T + 1)


@pytest.mark.parametrize("tolerance", [True, False, "300", None])
def test_a_tolerance_that_is_not_a_number_is_a_programming_error(tolerance: object) -> None:
    header = signature_header(BODY, [SECRET], T)
    with pytest.raises(ValueError, match="tolerance"):
        verify_signature(BODY, header, SECRET, tolerance=tolerance, now=T)  # type: ignore[arg-type]


def test_a_time_entry_holding_a_second_equals_sign_is_malformed() -> None:
    header = signature_header(BODY, [SECRET], T)
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, f"t={T}=,{header}", SECRET, now=T)
