"""Schedules in real workerd: zoneinfo has its time zone data under Pyodide (the tzdata wheel is
bundled), and a Paris cron fires at the same instants there as under CPython, across both
daylight-saving changes of a year."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from workerd_runtime import Runtime

from threadline.errors import InvalidSchedule
from threadline.schedules import CronSchedule

PARIS = ZoneInfo("Europe/Paris")


def paris_ms(*parts: int, fold: int = 0) -> int:
    return int(datetime(*parts, tzinfo=PARIS, fold=fold).timestamp()) * 1000  # type: ignore[misc]


def paris(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).astimezone(PARIS).isoformat(" ", "minutes")


def ask(workerd: Runtime, op: str, **args: Any) -> Any:
    reply = workerd.request(f"/_schedules/{op}?{urlencode(args)}")
    assert reply.status == 200, (reply.status, reply.body, workerd.output())
    return reply.json()


def cpython_fires(expr: str, after: int, count: int) -> list[int]:
    schedule = CronSchedule("probe", expr, tz="Europe/Paris")
    fires = []
    for _ in range(count):
        after = schedule.next_fire(after)
        fires.append(after)
    return fires


def test_zoneinfo_has_time_zone_data_in_workerd(workerd: Runtime) -> None:
    facts = ask(workerd, "declare", expr="0 9 * * *", tz="Europe/Paris")
    print(f"workerd: Python {facts['python']}, Pyodide {facts['pyodide']}, tzdata "
          f"{facts['tzdata']}, cronsim {facts['cronsim']}, {facts['zones']} zones, "
          f"TZPATH {facts['tzpath']}")
    assert facts["error"] is None
    assert facts["python"].startswith("3.")
    assert facts["zones"] > 400  # the whole IANA database, from the bundled tzdata wheel


def test_a_paris_cron_fires_at_the_same_instants_in_workerd_as_in_cpython_across_dst(
    workerd: Runtime,
) -> None:
    cases = {
        # A fixed time in the skipped hour (29 March) and in the repeated hour (25 October).
        ("30 2 * * *", paris_ms(2026, 3, 27, 12)): [
            "2026-03-28 02:30+01:00", "2026-03-29 03:00+02:00", "2026-03-30 02:30+02:00"],
        ("30 2 * * *", paris_ms(2026, 10, 23, 12)): [
            "2026-10-24 02:30+02:00", "2026-10-25 02:30+02:00", "2026-10-26 02:30+01:00"],
        # An hourly job follows real time: twice in the repeated hour.
        ("0 * * * *", paris_ms(2026, 10, 25, 1, 30)): [
            "2026-10-25 02:00+02:00", "2026-10-25 02:00+01:00", "2026-10-25 03:00+01:00"],
        ("0 9 * * MON-FRI", paris_ms(2026, 3, 26, 12)): [
            "2026-03-27 09:00+01:00", "2026-03-30 09:00+02:00", "2026-03-31 09:00+02:00"],
    }
    for (expr, after), expected in cases.items():
        inside = ask(workerd, "fires", expr=expr, tz="Europe/Paris", after=after, count=3)
        assert inside["fires"] == cpython_fires(expr, after, 3), expr
        assert [paris(t) for t in inside["fires"]] == expected, expr


def test_a_month_of_downtime_coalesces_to_the_same_fire_in_workerd_as_in_cpython(
    workerd: Runtime,
) -> None:
    expr, stored = "0 9 * * MON-FRI", paris_ms(2026, 3, 2, 9)
    now = paris_ms(2026, 4, 2, 14, 7)
    inside = ask(workerd, "due", expr=expr, tz="Europe/Paris", stored=stored, now=now)
    due = CronSchedule("probe", expr, tz="Europe/Paris").due(stored, now)
    assert inside["due"] == [due.fire_ms, due.next_ms]
    assert [paris(t) for t in inside["due"]] == ["2026-04-02 09:00+02:00",
                                                 "2026-04-03 09:00+02:00"]


def test_an_unknown_time_zone_is_refused_at_declaration_in_workerd(workerd: Runtime) -> None:
    inside = ask(workerd, "declare", expr="0 9 * * *", tz="Europe/Pariss")
    try:
        CronSchedule("probe", "0 9 * * *", tz="Europe/Pariss")
    except InvalidSchedule as exc:
        assert inside["error"] == exc.message
    assert "unknown time zone 'Europe/Pariss'" in inside["error"]
