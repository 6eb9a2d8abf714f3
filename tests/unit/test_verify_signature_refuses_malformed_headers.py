"""verify_signature on a hostile header: every malformed one is SignatureInvalid (a receiver
answers it with a 4xx), never another exception (which a receiver turns into a 500); a
tolerance or clock that would accept any time is a programming error."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threadline import SignatureInvalid, verify_signature
from threadline.delivery.webhooks import MAX_HEADER_CHARS, signature_header

BODY = b'{"space":"acme","subscriber":"crm","records":[]}'
SECRET = "whsec_test"
T = 1_700_000_000
GOOD = signature_header(BODY, [SECRET], T)
GOOD_V1 = GOOD.split(",")[1]


@pytest.mark.parametrize("header", [
    "t=" + "9" * 5_000 + "," + GOOD_V1,     # past int()'s digit limit
    "t=" + "1" * 4_000 + "," + GOOD_V1,     # under it, yet no unix time
    f"t=0{T}," + GOOD_V1,                   # a leading zero: not how threadline writes it
])
def test_a_time_that_is_no_unix_time_is_refused_as_signature_invalid(header: str) -> None:
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, SECRET, now=T)


@pytest.mark.parametrize("candidate", ["\udc80" * 64, "\ud800", "é" * 64, "A" * 64, "0" * 63])
def test_a_signature_that_is_not_64_hex_digits_is_a_mismatch(candidate: str) -> None:
    with pytest.raises(SignatureInvalid, match="no v1 signature matches"):
        verify_signature(BODY, f"t={T},v1={candidate}", SECRET, now=T)


def test_a_header_longer_than_any_threadline_writes_is_refused_unread() -> None:
    header = GOOD + ",v0=" + "x" * MAX_HEADER_CHARS
    with pytest.raises(SignatureInvalid, match="longer than"):
        verify_signature(BODY, header, SECRET, now=T)


@pytest.mark.parametrize("tolerance", [math.nan, math.inf, -math.inf, -1, -0.5])
def test_a_non_finite_or_negative_tolerance_is_a_value_error(tolerance: float) -> None:
    # A NaN tolerance would accept every time (no comparison with NaN is true), an infinite
    # one every replay.
    with pytest.raises(ValueError, match="tolerance"):
        verify_signature(BODY, GOOD, SECRET, tolerance=tolerance, now=T + 10**9)


@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf])
def test_a_non_finite_now_is_a_value_error(now: float) -> None:
    with pytest.raises(ValueError, match="now"):
        verify_signature(BODY, GOOD, SECRET, now=now)


_DIGITS = st.one_of(
    st.text(alphabet="0123456789", min_size=1, max_size=20),
    st.integers(4_000, 6_000).map(lambda n: "7" * n),  # around int()'s digit limit
)
_VALUES = st.one_of(
    _DIGITS, st.text(max_size=80), st.sampled_from([str(T), GOOD_V1[3:], "\udc80" * 64]),
    st.text(alphabet="0123456789abcdefABCDEF", min_size=60, max_size=70),
)
_ENTRIES = st.tuples(st.sampled_from(["t", "v1", "v0", " t", "v1 ", ""]) | st.text(max_size=4),
                     st.sampled_from(["=", "==", ""]), _VALUES).map("".join)


def _verify_or_refuse(header: str) -> None:
    try:
        verify_signature(BODY, header, SECRET, now=T)
    except SignatureInvalid:
        return
    # Only a header holding threadline's own time and signature may verify.
    assert f"t={T}" in header and GOOD_V1 in header


@settings(max_examples=400, deadline=None)
@given(st.lists(_ENTRIES, min_size=1, max_size=6).map(",".join))
def test_every_header_built_from_hostile_entries_is_refused_with_signature_invalid(
    header: str,
) -> None:
    _verify_or_refuse(header)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_every_arbitrary_text_header_is_refused_with_signature_invalid(header: str) -> None:
    _verify_or_refuse(header)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=50), st.integers(), st.lists(st.text())))
def test_a_header_that_is_not_a_string_is_refused_with_signature_invalid(header: object) -> None:
    with pytest.raises(SignatureInvalid):
        verify_signature(BODY, header, SECRET, now=T)  # type: ignore[arg-type]
