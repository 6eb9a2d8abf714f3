"""Counting what storage costs: statements, rows read, rows written, alarm writes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MeterReading:
    """A snapshot of a :class:`Meter`; subtract two readings to cost a piece of work."""

    statements: int = 0
    rows_read: int = 0
    rows_written: int = 0
    alarm_writes: int = 0
    approximate: bool = False

    def __sub__(self, earlier: MeterReading) -> MeterReading:
        return MeterReading(
            statements=self.statements - earlier.statements,
            rows_read=self.rows_read - earlier.rows_read,
            rows_written=self.rows_written - earlier.rows_written,
            alarm_writes=self.alarm_writes - earlier.alarm_writes,
            approximate=self.approximate or earlier.approximate,
        )


class Meter:
    """Cumulative storage cost of one object.

    On Cloudflare the row figures are workerd's own billed counters. ``SqliteStorage`` can only
    count rows returned and rows changed, which it marks with ``approximate=True``: index
    updates, for one, are not counted there. ``alarm_writes`` counts ``set_alarm``/``delete_alarm``
    calls, which Cloudflare bills as rows written but reports in no cursor.
    """

    def __init__(self, *, approximate: bool = False) -> None:
        self.approximate = approximate
        self.statements = 0
        self.rows_read = 0
        self.rows_written = 0
        self.alarm_writes = 0

    def record(self, rows_read: int, rows_written: int) -> None:
        """Add one statement's figures."""
        self.statements += 1
        self.rows_read += rows_read
        self.rows_written += rows_written

    def record_alarm_write(self) -> None:
        """Count one write of the alarm slot."""
        self.alarm_writes += 1

    def reading(self) -> MeterReading:
        """A frozen snapshot of the counters so far."""
        return MeterReading(
            statements=self.statements,
            rows_read=self.rows_read,
            rows_written=self.rows_written,
            alarm_writes=self.alarm_writes,
            approximate=self.approximate,
        )


__all__ = ["Meter", "MeterReading"]
