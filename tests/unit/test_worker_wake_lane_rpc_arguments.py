"""The Worker's ``wake_lane(id, at_ms, cursor)`` RPC takes JavaScript numbers (doubles): a wake
time is a finite number of epoch milliseconds (a fraction rounded up), a cursor an integer from
0 to 2**53 - 1. Anything else is refused with a SchedulingError naming the argument, never
taken for "now" or "no cursor" (nor raised as a raw ValueError or OverflowError).
``ThreadObjectBase.wake_lane`` turns JavaScript's null and undefined into None and calls this
check (workerd runs that shell; its logic is here)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from threadline.errors import SchedulingError
from threadline.maintenance.host_lanes import MAX_RPC_CURSOR, MAX_RPC_WAKE_MS, wake_arguments
from threadline.storage.cloudflare import is_js_null

AT = 1_700_000_000_000


def test_well_formed_arguments_become_a_time_and_a_cursor() -> None:
    assert wake_arguments("sync", None, None) == ("sync", None, None)
    _, at, cursor = wake_arguments("sync", AT + 0.25, 7)
    assert at == datetime.fromtimestamp((AT + 1) / 1000, UTC) and cursor == 7
    # JavaScript cannot tell 7 from 7.0, nor the safe-integer bound from its double.
    assert wake_arguments("sync", float(AT), 7.0)[2] == 7
    assert wake_arguments("sync", MAX_RPC_WAKE_MS, float(MAX_RPC_CURSOR))[2] == MAX_RPC_CURSOR
    assert wake_arguments("sync", 0, 0) == ("sync", datetime.fromtimestamp(0, UTC), 0)


@pytest.mark.parametrize("at_ms", [
    math.nan, math.inf, -math.inf, 1e300, MAX_RPC_WAKE_MS + 0.5, -1, True, "1700000000000",
    [AT],
])
def test_a_wake_time_that_is_not_a_finite_epoch_ms_is_refused(at_ms: Any) -> None:
    with pytest.raises(SchedulingError, match="at_ms"):
        wake_arguments("sync", at_ms, None)


@pytest.mark.parametrize("cursor", [
    5.5, 2.0**53, 2**53, float(2**60), -1, math.nan, math.inf, True, "5", {"seq": 5},
])
def test_a_cursor_that_is_not_an_integer_a_javascript_number_holds_is_refused(
    cursor: Any,
) -> None:
    with pytest.raises(SchedulingError, match="cursor"):
        wake_arguments("sync", None, cursor)


def test_a_lane_id_that_is_not_text_is_refused() -> None:
    with pytest.raises(SchedulingError, match="lane id"):
        wake_arguments(None, None, None)


def test_none_is_javascripts_null_outside_pyodide() -> None:
    assert is_js_null(None) and not is_js_null(0) and not is_js_null(math.nan)
