"""Schedule declarations are validated when they are made, with a clear error."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import FrozenInstanceError
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threadline.errors import ErrorCode, InvalidSchedule, SchedulingError, ThreadlineError
from threadline.schedules import (
    MAX_INTERVAL,
    CronSchedule,
    EverySchedule,
    validate_schedule_id,
)
from threadline.threads.turn import MAX_SLEEP_SECONDS


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("0 25 * * *", "Bad hour"),
        ("61 * * * *", "Bad minute"),
        ("0 9 * * MON-XYZ", "Bad day-of-week"),
        ("0 0 31 2 *", "Bad day-of-month"),  # 31 February never comes
        ("*/0 * * * *", "Bad minute"),
        ("0 9 * *", "has 4 fields, expected 5"),
        ("0 0 9 * * *", "has 6 fields, expected 5"),  # seconds are not a schedule's grain
        ("", "has 0 fields"),
        ("@daily", "has 1 fields"),
    ],
)
def test_an_invalid_cron_expression_fails_at_declaration(expression: str, says: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        CronSchedule("digest", expression)
    assert says in str(caught.value)
    assert "'digest'" in str(caught.value)
    assert caught.value.code == ErrorCode.INVALID_SCHEDULE


@pytest.mark.parametrize("tz", ["Europe/Pariss", "Mars/Olympus_Mons", "utc", "../etc/passwd",
                                "/usr/share/zoneinfo/UTC", "", "Europe"])
def test_an_unknown_time_zone_fails_at_declaration(tz: str) -> None:
    with pytest.raises(InvalidSchedule, match="unknown time zone"):
        CronSchedule("digest", "0 9 * * *", tz=tz)


def test_a_time_zone_that_is_not_text_fails_at_declaration() -> None:
    with pytest.raises(InvalidSchedule, match="time zone must be a string"):
        CronSchedule("digest", "0 9 * * *", tz=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", ["digest", "billing-sync", "a", "team.1:nightly_run", "x" * 64])
def test_a_schedule_id_follows_the_host_lane_rule(good: str) -> None:
    assert validate_schedule_id(good) == good
    assert EverySchedule(good, timedelta(minutes=1)).id == good


@pytest.mark.parametrize("bad", ["", "Digest", "-x", "x" * 65, "a b", "threadline:digest",
                                 "threadline:native"])
def test_an_invalid_or_reserved_schedule_id_fails_at_declaration(bad: str) -> None:
    with pytest.raises(InvalidSchedule, match="invalid schedule id"):
        CronSchedule(bad, "0 9 * * *")
    with pytest.raises(InvalidSchedule, match="invalid schedule id"):
        EverySchedule(bad, timedelta(minutes=1))


@pytest.mark.parametrize(
    ("interval", "says"),
    [
        (timedelta(0), "from 1 second to 366 days"),
        (timedelta(milliseconds=999), "from 1 second to 366 days"),
        (timedelta(seconds=-5), "from 1 second to 366 days"),
        (timedelta(days=366, milliseconds=1), "from 1 second to 366 days"),
        (timedelta(seconds=1, microseconds=500), "whole number of milliseconds"),
        (300, "must be a timedelta"),
    ],
)
def test_an_interval_out_of_bounds_fails_at_declaration(interval: object, says: str) -> None:
    with pytest.raises(InvalidSchedule, match=says):
        EverySchedule("sync", interval)  # type: ignore[arg-type]


def test_the_interval_bounds_are_accepted_and_the_longest_is_the_durable_sleep_bound() -> None:
    assert EverySchedule("s", timedelta(seconds=1)).interval_ms == 1_000
    assert EverySchedule("s", MAX_INTERVAL).interval == timedelta(seconds=MAX_SLEEP_SECONDS)


def test_declarations_are_frozen_values_equal_by_what_they_fire_on() -> None:
    digest = CronSchedule("digest", " 0  9 * *   mon-fri ", tz="Europe/Paris")
    assert digest.expression == "0 9 * * mon-fri"
    assert digest == CronSchedule("digest", "0 9 * * mon-fri", tz="Europe/Paris")
    assert hash(digest) == hash(CronSchedule("digest", "0 9 * * mon-fri", tz="Europe/Paris"))
    assert digest.spec == "cron 0 9 * * mon-fri Europe/Paris"
    assert EverySchedule("s", timedelta(minutes=5)).spec == "every 300000ms"
    with pytest.raises(FrozenInstanceError):
        digest.tz = "UTC"  # type: ignore[misc]


def test_schedule_errors_sit_in_the_error_tree() -> None:
    assert issubclass(InvalidSchedule, SchedulingError)
    assert issubclass(InvalidSchedule, ThreadlineError)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789*/,-LW#? abcdefghijklmnopqrstuvwxyzMONTUEFRISAJ\t", max_size=30))
def test_any_text_is_either_a_cron_expression_or_refused_with_invalid_schedule(text: str) -> None:
    try:
        schedule = CronSchedule("fuzz", text)
    except InvalidSchedule:
        return
    assert schedule.next_fire(946_684_800_000) > 946_684_800_000


def test_declaring_a_schedule_module_loads_cronsim_only_for_a_cron_schedule() -> None:
    code = (
        "import sys, datetime, threadline, threadline.schedules as s;"
        "s.EverySchedule('e', datetime.timedelta(minutes=1));"
        "before = 'cronsim' in sys.modules;"
        "s.CronSchedule('c', '0 9 * * *');"
        "print(before, 'cronsim' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
