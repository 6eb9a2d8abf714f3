"""Retry-After as an HTTP answer gives it: delay-seconds or an HTTP date, read into the
milliseconds to wait from the time the answer came; anything else is no advice at all."""

from __future__ import annotations

import pytest

from threadline.delivery.outbound import retry_after_ms

NOW_MS = 1_700_000_000_000  # Tue, 14 Nov 2023 22:13:20 GMT


@pytest.mark.parametrize(("value", "expected"), [
    ("120", 120_000), (" 7 ", 7_000), ("0", 0),
    ("9" * 5_000, 10**15),  # a huge number of seconds: a long wait, read, never int()-ed whole
])
def test_delay_seconds_are_read_as_milliseconds(value: str, expected: int) -> None:
    assert retry_after_ms(value, NOW_MS) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("Tue, 14 Nov 2023 22:15:20 GMT", 120_000),      # the IMF-fixdate of RFC 9110
    ("Tuesday, 14-Nov-23 22:13:50 GMT", 30_000),     # the obsolete RFC 850 form
    ("Tue Nov 14 22:14:20 2023", 60_000),            # asctime
    ("Tue, 14 Nov 2023 22:00:00 GMT", 0),            # already past: no wait asked
])
def test_an_http_date_is_read_as_the_wait_until_it(value: str, expected: int) -> None:
    assert retry_after_ms(value, NOW_MS) == expected


@pytest.mark.parametrize("value", [
    None, "", "   ", "-5", "+5", "1.5", "1e3", "soon", "\uff11\uff12", "120 s",
    "Tue, 99 Nov 2023 22:15:20 GMT", "Mon, 14 Nov 2023", "\udc80", "0x10",
])
def test_a_garbage_retry_after_is_no_advice(value: str | None) -> None:
    assert retry_after_ms(value, NOW_MS) is None
