"""Helpers for the schedule tests: readable instants in a time zone, as epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

PARIS = ZoneInfo("Europe/Paris")


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, *,
       tz: ZoneInfo | None = None, fold: int = 0) -> int:
    """Epoch milliseconds of a wall-clock time (UTC unless ``tz``)."""
    when = datetime(year, month, day, hour, minute, tzinfo=tz or UTC, fold=fold)
    return int(when.timestamp()) * 1000


def utc(epoch_ms: int) -> str:
    """An instant as ``YYYY-MM-DD HH:MMZ``."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%MZ")


def paris(epoch_ms: int) -> str:
    """An instant as Paris wall time with its offset, ``YYYY-MM-DD HH:MM+HH:MM``."""
    return datetime.fromtimestamp(epoch_ms / 1000, PARIS).isoformat(" ", "minutes")


def fires(schedule: object, after_ms: int, count: int) -> list[int]:
    """The next ``count`` fire times after ``after_ms``."""
    out: list[int] = []
    for _ in range(count):
        after_ms = schedule.next_fire(after_ms)  # type: ignore[attr-defined]
        out.append(after_ms)
    return out
