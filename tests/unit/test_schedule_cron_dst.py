"""A cron schedule with a time zone across both daylight-saving changes of a year.

Europe/Paris in 2026: on 29 March 02:00 CET becomes 03:00 CEST (the hour 02:00-03:00 does not
exist); on 25 October 03:00 CEST becomes 02:00 CET (the hour 02:00-03:00 happens twice). The
expected times are cronsim's documented (Debian cron) behaviour, pinned here.
"""

from __future__ import annotations

from itertools import pairwise

from schedule_support import PARIS, fires, ms, paris

from threadline.schedules import CronSchedule


def test_a_fixed_time_in_the_skipped_hour_fires_at_the_end_of_the_gap_in_march() -> None:
    nightly = CronSchedule("nightly", "30 2 * * *", tz="Europe/Paris")
    assert [paris(t) for t in fires(nightly, ms(2026, 3, 27, 12, tz=PARIS), 3)] == [
        "2026-03-28 02:30+01:00",
        "2026-03-29 03:00+02:00",  # 02:30 does not exist that night: first valid minute after
        "2026-03-30 02:30+02:00",
    ]


def test_a_fixed_time_in_the_repeated_hour_fires_once_at_its_first_occurrence_in_october() -> None:
    nightly = CronSchedule("nightly", "30 2 * * *", tz="Europe/Paris")
    assert [paris(t) for t in fires(nightly, ms(2026, 10, 23, 12, tz=PARIS), 3)] == [
        "2026-10-24 02:30+02:00",
        "2026-10-25 02:30+02:00",  # not again at 02:30+01:00, an hour later
        "2026-10-26 02:30+01:00",
    ]


def test_a_start_inside_the_second_occurrence_of_the_repeated_hour_never_yields_an_earlier_fire(
) -> None:
    nightly = CronSchedule("nightly", "30 2 * * *", tz="Europe/Paris")
    second_pass = ms(2026, 10, 25, 2, 10, tz=PARIS, fold=1)  # 02:10+01:00, after 02:30+02:00
    assert paris(nightly.next_fire(second_pass)) == "2026-10-26 02:30+01:00"


def test_an_hourly_cron_follows_real_time_across_both_changes() -> None:
    hourly = CronSchedule("hourly", "0 * * * *", tz="Europe/Paris")
    spring = fires(hourly, ms(2026, 3, 29, 0, 30, tz=PARIS), 3)
    assert [paris(t) for t in spring] == [
        "2026-03-29 01:00+01:00", "2026-03-29 03:00+02:00", "2026-03-29 04:00+02:00"
    ]
    autumn = fires(hourly, ms(2026, 10, 25, 0, 30, tz=PARIS), 4)
    assert [paris(t) for t in autumn] == [
        "2026-10-25 01:00+02:00", "2026-10-25 02:00+02:00",
        "2026-10-25 02:00+01:00", "2026-10-25 03:00+01:00",
    ]
    # Each real hour fires once: the fires are exactly one hour apart in both changes.
    for times in (spring, autumn):
        assert {b - a for a, b in pairwise(times)} == {3_600_000}


def test_a_sub_hourly_cron_inside_the_changed_hour_follows_real_time() -> None:
    # '*' in the minute field: not a fixed time of day, so no Debian special case.
    early = CronSchedule("early", "*/30 2 * * *", tz="Europe/Paris")
    assert [paris(t) for t in fires(early, ms(2026, 3, 28, 12, tz=PARIS), 3)] == [
        "2026-03-30 02:00+02:00", "2026-03-30 02:30+02:00", "2026-03-31 02:00+02:00"
    ]  # nothing on 29 March: its 02:xx never happened
    assert [paris(t) for t in fires(early, ms(2026, 10, 25, 0, tz=PARIS), 4)] == [
        "2026-10-25 02:00+02:00", "2026-10-25 02:30+02:00",
        "2026-10-25 02:00+01:00", "2026-10-25 02:30+01:00",
    ]


def test_a_weekday_cron_keeps_its_local_time_across_both_changes() -> None:
    digest = CronSchedule("digest", "0 9 * * MON-FRI", tz="Europe/Paris")
    march = fires(digest, ms(2026, 3, 26, 12, tz=PARIS), 3)
    assert [paris(t) for t in march] == [
        "2026-03-27 09:00+01:00", "2026-03-30 09:00+02:00", "2026-03-31 09:00+02:00"
    ]
    october = fires(digest, ms(2026, 10, 22, 12, tz=PARIS), 3)
    assert [paris(t) for t in october] == [
        "2026-10-23 09:00+02:00", "2026-10-26 09:00+01:00", "2026-10-27 09:00+01:00"
    ]


def test_a_utc_cron_ignores_the_paris_changes() -> None:
    daily = CronSchedule("daily", "30 2 * * *")
    assert daily.tz == "UTC"
    march = fires(daily, ms(2026, 3, 28), 3)
    assert march == [ms(2026, 3, 28, 2, 30), ms(2026, 3, 29, 2, 30), ms(2026, 3, 30, 2, 30)]


def test_coalescing_inside_the_repeated_hour_finds_that_nights_fire() -> None:
    # Waking at 02:10+01:00 on 25 October, the 02:30+02:00 fire of that night (40 minutes
    # earlier in real time) is the latest missed one. cronsim's reverse iteration, which reads
    # the wall clock only, would answer the night before.
    nightly = CronSchedule("nightly", "30 2 * * *", tz="Europe/Paris")
    stored = ms(2026, 10, 24, 2, 30, tz=PARIS)
    due = nightly.due(stored, ms(2026, 10, 25, 2, 10, tz=PARIS, fold=1))
    assert due.fire_ms is not None
    assert paris(due.fire_ms) == "2026-10-25 02:30+02:00"
    assert paris(due.next_ms) == "2026-10-26 02:30+01:00"


def test_coalescing_across_the_skipped_hour_names_the_fire_next_fire_produced() -> None:
    nightly = CronSchedule("nightly", "30 2 * * *", tz="Europe/Paris")
    stored = ms(2026, 3, 28, 2, 30, tz=PARIS)
    due = nightly.due(stored, ms(2026, 3, 29, 3, 45, tz=PARIS))
    assert due.fire_ms is not None
    assert paris(due.fire_ms) == "2026-03-29 03:00+02:00"
    assert paris(due.next_ms) == "2026-03-30 02:30+02:00"
