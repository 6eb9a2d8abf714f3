"""An ``every`` schedule fires on the epoch grid of its interval and never overlaps itself."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from schedule_support import ms, utc

from threadline.schedules import EverySchedule

DAY_MS = 86_400_000


def test_fires_fall_on_the_multiples_of_the_interval_since_the_epoch() -> None:
    sync = EverySchedule("billing-sync", timedelta(minutes=5))
    first = sync.next_fire(ms(2026, 6, 1, 12, 3) + 17)
    assert utc(first) == "2026-06-01 12:05Z"
    assert [utc(t) for t in (sync.next_fire(first), sync.next_fire(sync.next_fire(first)))] == [
        "2026-06-01 12:10Z", "2026-06-01 12:15Z"
    ]
    weekly = EverySchedule("weekly", timedelta(days=7))
    assert utc(weekly.next_fire(ms(2026, 6, 1))) == "2026-06-04 00:00Z"  # a Thursday


def test_a_run_that_outlasts_its_interval_is_followed_by_the_first_fire_after_it_ended() -> None:
    sync = EverySchedule("billing-sync", timedelta(minutes=5))
    fire = ms(2026, 6, 1, 12, 5)
    ended = ms(2026, 6, 1, 12, 17) + 300  # the run took 12 minutes: 12:10 and 12:15 passed
    assert utc(sync.next_after_run(fire, ended)) == "2026-06-01 12:20Z"
    assert utc(sync.next_after_run(fire, fire + 1_000)) == "2026-06-01 12:10Z"


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1_000, 10 * DAY_MS),
    st.integers(ms(2026, 1, 1), ms(2027, 1, 1)),
    st.integers(0, 30 * DAY_MS),
)
def test_a_schedule_never_overlaps_itself(interval: int, since: int, duration: int) -> None:
    every = EverySchedule("e", timedelta(milliseconds=interval))
    fire = every.next_fire(since)
    following = every.next_after_run(fire, fire + duration)
    assert following > fire + duration  # the next run starts after this one ended
    assert following - fire >= interval  # and at least one interval after this one's time
    assert following % interval == 0
