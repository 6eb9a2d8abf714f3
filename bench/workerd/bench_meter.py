"""Per-statement metering of a threadline storage, for the benchmark only (CPython and workerd).

:class:`StatementLog` wraps one storage object's ``exec``/``set_alarm``/``delete_alarm`` and
records, for each statement, the meter delta it caused (so the ``SELECT changes()`` a
compare-and-set needs on Cloudflare is charged to the statement that asked for it). It runs
the same way over ``SqliteStorage`` (CPython) and ``CloudflareStorage`` (workerd), and imports
nothing but the standard library and threadline's storage port.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_SPACES = re.compile(r"\s+")


def statement_label(sql: str) -> str:
    """One line per statement shape: whitespace collapsed, cut to a readable length."""
    text = _SPACES.sub(" ", sql).strip()
    return text if len(text) <= 160 else text[:157] + "..."


@dataclass
class Cost:
    """What a piece of work cost: statements, rows, alarm writes."""

    statements: int = 0
    rows_read: int = 0
    rows_written: int = 0
    set_alarm: int = 0
    delete_alarm: int = 0
    by_statement: dict[str, list[int]] = field(default_factory=dict)

    def add(self, label: str, read: int, written: int, statements: int) -> None:
        self.statements += statements
        self.rows_read += read
        self.rows_written += written
        entry = self.by_statement.setdefault(label, [0, 0, 0])
        entry[0] += statements
        entry[1] += read
        entry[2] += written

    def as_dict(self, *, explain: bool = False) -> dict[str, Any]:
        """JSON-ready figures (with the per-statement rows when ``explain``)."""
        out: dict[str, Any] = {
            "statements": self.statements,
            "rows_read": self.rows_read,
            "rows_written": self.rows_written,
            "set_alarm": self.set_alarm,
            "delete_alarm": self.delete_alarm,
        }
        if explain:
            out["by_statement"] = [
                {"sql": sql, "count": c, "rows_read": r, "rows_written": w}
                for sql, (c, r, w) in self.by_statement.items()
            ]
        return out


class StatementLog:
    """Records the cost of every statement run through one storage object."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self.current: Cost | None = None
        exec_fn: Callable[..., Any] = storage.exec
        set_alarm: Callable[[int], None] = storage.set_alarm
        delete_alarm: Callable[[], None] = storage.delete_alarm
        meter = storage.meter
        #: The storage's own ``exec``: for reads that must never be charged to a measurement
        #: (a poll served while an alarm handler awaits would otherwise land in its cost).
        self.unmetered_exec = exec_fn

        def metered_exec(sql: str, *params: Any) -> Any:
            before = meter.reading()
            rows = exec_fn(sql, *params)
            if self.current is not None:
                label = statement_label(sql)
                self.current.add(label, rows.rows_read, rows.rows_written, 1)
                # What the storage ran besides (the changed-row count a compare-and-set reads
                # on Cloudflare) is charged on a line of its own.
                extra = meter.reading() - before
                if extra.statements > 1:
                    self.current.add(
                        f"SELECT changes() -- after: {label[:60]}",
                        extra.rows_read - rows.rows_read,
                        extra.rows_written - rows.rows_written,
                        extra.statements - 1,
                    )
            return rows

        def metered_set_alarm(epoch_ms: int) -> None:
            set_alarm(epoch_ms)
            if self.current is not None:
                self.current.set_alarm += 1

        def metered_delete_alarm() -> None:
            delete_alarm()
            if self.current is not None:
                self.current.delete_alarm += 1

        storage.exec = metered_exec
        storage.set_alarm = metered_set_alarm
        storage.delete_alarm = metered_delete_alarm

    @contextmanager
    def measure(self) -> Iterator[Cost]:
        """Charge every statement run inside the block to a fresh :class:`Cost`."""
        outer, cost = self.current, Cost()
        self.current = cost
        try:
            yield cost
        finally:
            self.current = outer
