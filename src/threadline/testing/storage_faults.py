"""Storage faults: the losses and failures a test injects into a :class:`SimulatedObject`.

A :class:`Crash` loses the object at a failpoint (:meth:`SimulatedObject.crash_at`) and a
:class:`StatementFailure` makes matching statements fail as a failing disk would
(:meth:`SimulatedObject.fail_statements`), through the fault-injecting SQLite storage the
simulated object runs on. :func:`is_eviction` tells the loss of the object from other errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from threadline.errors import Evicted, StorageError
from threadline.storage import SqliteStorage
from threadline.storage.port import Rows, SqlValue

T = TypeVar("T")


@dataclass
class Crash:
    """A crash installed by :meth:`SimulatedObject.crash_at`."""

    location: str
    occurrence: int
    #: Arrivals at ``location`` counted since the crash was installed.
    arrivals: int = 0
    #: True once :class:`~threadline.errors.Evicted` was raised at the chosen arrival.
    fired: bool = False


@dataclass
class StatementFailure:
    """Storage failures installed by :meth:`SimulatedObject.fail_statements`."""

    containing: str
    #: How many more matching statements will fail.
    remaining: int


class _SimulatedStorage(SqliteStorage):
    """SQLite storage that reports each outermost commit and fails statements on request."""

    def __init__(
        self, path: str, on_commit: Callable[[], None], failures: list[StatementFailure]
    ) -> None:
        super().__init__(path)
        self._on_commit = on_commit
        self.failures = failures

    def exec(self, sql: str, *params: SqlValue) -> Rows:
        for failure in self.failures:
            if failure.remaining > 0 and failure.containing in sql:
                failure.remaining -= 1
                raise StorageError(f"injected storage failure ({failure.containing!r})")
        return super().exec(sql, *params)

    def transaction(self, fn: Callable[[], T]) -> T:
        result = super().transaction(fn)
        if not self.in_transaction():
            self._on_commit()
        return result


def is_eviction(exc: BaseException) -> bool:
    """Whether ``exc`` is the loss of the object: :class:`~threadline.errors.Evicted`, alone or
    anywhere inside an exception group (a task group re-raises it wrapped)."""
    if isinstance(exc, Evicted):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(is_eviction(inner) for inner in exc.exceptions)
    return False


__all__ = ["Crash", "StatementFailure", "is_eviction"]
