"""Fires missed while the object could not run coalesce into ONE run, with the latest time."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from schedule_support import PARIS, ms, paris, utc

from threadline.schedules import CronSchedule, EverySchedule, Schedule

DAY_MS = 86_400_000


def test_a_month_of_downtime_coalesces_into_one_cron_fire_with_the_latest_missed_time() -> None:
    digest = CronSchedule("digest", "0 9 * * MON-FRI", tz="Europe/Paris")
    stored = ms(2026, 3, 2, 9, tz=PARIS)  # the fire the object was waiting for
    back = ms(2026, 4, 2, 14, 7, tz=PARIS)  # a month later, a Thursday afternoon
    due = digest.due(stored, back)
    assert due.fire_ms is not None
    assert paris(due.fire_ms) == "2026-04-02 09:00+02:00"  # that morning: 22 fires became one
    assert paris(due.next_ms) == "2026-04-03 09:00+02:00"


def test_a_month_of_downtime_coalesces_into_one_every_fire_with_the_latest_missed_time() -> None:
    sync = EverySchedule("billing-sync", timedelta(minutes=5))
    stored = ms(2026, 3, 2, 9)
    back = ms(2026, 4, 2, 14, 7) + 42_000
    due = sync.due(stored, back)
    assert due.fire_ms is not None
    assert utc(due.fire_ms) == "2026-04-02 14:05Z"
    assert utc(due.next_ms) == "2026-04-02 14:10Z"


def test_an_alarm_on_time_runs_the_stored_fire() -> None:
    hourly = CronSchedule("hourly", "0 * * * *")
    stored = ms(2026, 5, 1, 10)
    due = hourly.due(stored, stored + 35)
    assert (due.fire_ms, due.next_ms) == (stored, ms(2026, 5, 1, 11))


def test_nothing_runs_before_the_stored_fire_time() -> None:
    hourly = CronSchedule("hourly", "0 * * * *")
    stored = ms(2026, 5, 1, 10)
    due = hourly.due(stored, stored - 1)
    assert (due.fire_ms, due.next_ms) == (None, stored)


def test_a_stored_time_the_declaration_no_longer_fires_at_runs_nothing_until_its_own_time() -> None:
    # A deploy moved the digest from 09:00 to 10:00; the object wakes at the old 09:00.
    moved = CronSchedule("digest", "0 10 * * *")
    due = moved.due(ms(2026, 5, 1, 9), ms(2026, 5, 1, 9) + 10)
    assert (due.fire_ms, due.next_ms) == (None, ms(2026, 5, 1, 10))


# -- properties -----------------------------------------------------------------------------

EXPRESSIONS = [
    "* * * * *", "0 * * * *", "*/7 * * * *", "30 2 * * *", "0 9 * * MON-FRI", "15 1,2,3 * * *",
    "0 0 1 * *", "0 12 L * *", "45 23 * * SUN", "0-59/20 2 25-31 3,10 *", "0 0 29 2 *",
]
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
YEAR_2026 = (ms(2026, 1, 1), ms(2027, 1, 1))

crons = st.builds(CronSchedule, st.just("c"), st.sampled_from(EXPRESSIONS), st.sampled_from(ZONES))
everys = st.builds(
    EverySchedule, st.just("e"),
    st.integers(1_000, 10 * DAY_MS).map(lambda n: timedelta(milliseconds=n)),
)
schedules = st.one_of(crons, everys)
instants = st.integers(*YEAR_2026)


@settings(max_examples=300, deadline=None)
@given(schedules, instants)
def test_the_next_fire_is_strictly_later_and_is_itself_a_fire(schedule: Schedule,
                                                              after: int) -> None:
    fire = schedule.next_fire(after)
    assert fire > after
    # Nothing fires in between: asking from any earlier point inside the gap gives the same.
    assert schedule.next_fire(fire - 1) == fire
    assert schedule.next_fire((after + fire) // 2) == fire
    assert schedule.next_fire(fire) > fire


@settings(max_examples=300, deadline=None)
@given(schedules, instants, st.integers(0, 40 * DAY_MS))
def test_a_coalesced_fire_is_the_latest_missed_one_and_the_next_is_after_now(
    schedule: Schedule, since: int, downtime: int
) -> None:
    stored = schedule.next_fire(since)
    now = stored + downtime
    due = schedule.due(stored, now)
    assert due.fire_ms is not None
    assert stored <= due.fire_ms <= now < due.next_ms
    assert schedule.next_fire(due.fire_ms) == due.next_ms  # no fire in (fire, now]
    assert schedule.next_fire(due.fire_ms - 1) == due.fire_ms  # the fire is a real fire time


@settings(max_examples=150, deadline=None)
@given(crons, instants, st.integers(0, 3 * DAY_MS))
def test_a_coalesced_cron_fire_is_the_last_of_the_fires_walked_one_by_one(
    schedule: CronSchedule, since: int, downtime: int
) -> None:
    stored = schedule.next_fire(since)
    now = stored + downtime
    walked = [stored]
    while (following := schedule.next_fire(walked[-1])) <= now:
        walked.append(following)
    assert schedule.latest_fire(stored, now) == walked[-1]
    assert schedule.due(stored, now).fire_ms == walked[-1]
