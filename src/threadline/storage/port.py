"""The storage port: the few Durable Object storage operations the core relies on."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from threadline.errors import StorageError
from threadline.storage.meter import Meter

T = TypeVar("T")

#: A value SQLite can bind or return.
SqlValue = int | float | str | bytes | None
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Rows:
    """The materialised result of one statement, with its storage cost.

    ``changed`` is how many rows an INSERT, UPDATE, DELETE or REPLACE itself changed (SQLite's
    ``changes()``): the count a compare-and-set checks. ``rows_written`` is the billed cost,
    which on Cloudflare also counts every index entry the statement touched, so it must never
    be used as a row count.

    A storage may give ``changes`` as a function that reads the count when ``changed`` is first
    asked for (Cloudflare's cursor has no such count: reading it is a statement of its own, so
    a write whose count nobody checks does not pay for it). Such a count is SQLite's count of
    the LAST statement: ask for it before the next statement runs (a storage raises
    :class:`StorageError` otherwise).
    """

    rows: list[Row] = field(default_factory=list)
    rows_read: int = 0
    rows_written: int = 0
    #: The changed-row count, or the function that reads it (see the class docstring).
    changes: int | Callable[[], int] = field(default=0, repr=False)

    @property
    def changed(self) -> int:
        """How many rows the statement itself changed (read once, then kept)."""
        counted = self.changes
        if isinstance(counted, int):
            return counted
        value = counted()
        object.__setattr__(self, "changes", value)
        return value

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def first(self) -> Row | None:
        """The first row, or None when there is none."""
        return self.rows[0] if self.rows else None

    def one(self) -> Row:
        """Exactly one row; anything else is a :class:`StorageError`."""
        if len(self.rows) != 1:
            raise StorageError(f"expected exactly one row, got {len(self.rows)}")
        return self.rows[0]

    def scalar(self) -> Any:
        """The first column of the only row (None when there is no row)."""
        row = self.first()
        return None if row is None else next(iter(row.values()))


@runtime_checkable
class Storage(Protocol):
    """Synchronous SQL, synchronous transactions and the object's single alarm slot.

    ``transaction(fn)`` runs ``fn`` atomically: if it raises, every statement and every alarm
    write made inside is rolled back and the exception propagates unchanged. Alarm writes made
    inside a transaction commit with its SQL.

    ``after_commit(callback)`` defers in-memory bookkeeping until the transaction commits.

    ``known_alarm()`` is the synchronous view of the slot: the last value this object wrote or
    read, rolled back with the transaction that wrote it. ``get_alarm()`` asks the platform and
    refreshes that view (a firing alarm empties the slot before the handler runs).
    """

    meter: Meter

    def exec(self, sql: str, *params: SqlValue) -> Rows:
        """Run one statement and return its rows, fully materialised."""
        ...

    def transaction(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` atomically (nested calls are savepoints) and return its result."""
        ...

    def in_transaction(self) -> bool:
        """True while a ``transaction`` body is running."""
        ...

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the transaction running now has committed.

        It runs when the outermost ``transaction`` returns; it is dropped, never run, when
        that transaction or the nested one it was registered in rolls back, so in-memory
        state set by it follows what storage holds. ``callback`` must not raise. Outside a
        transaction raises :class:`StorageError`.
        """
        ...

    def set_alarm(self, epoch_ms: int) -> None:
        """Replace the alarm slot; committed with the SQL around it."""
        ...

    def delete_alarm(self) -> None:
        """Empty the alarm slot; committed with the SQL around it."""
        ...

    def known_alarm(self) -> int | None:
        """The alarm slot as this object last wrote or read it."""
        ...

    async def get_alarm(self) -> int | None:
        """Read the alarm slot from the platform and refresh ``known_alarm``."""
        ...

    async def sync(self) -> None:
        """Wait until every write so far is durable (before an external side effect)."""
        ...


def statement_verb(sql: str) -> str:
    """The statement's first keyword, upper-cased (``""`` for an empty statement)."""
    words = sql.lstrip().split(None, 1)
    return words[0].upper() if words else ""


def chunked(values: Sequence[T], size: int = 100) -> Iterator[Sequence[T]]:
    """Split ``values`` so that no statement binds more than ``size`` parameters."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


__all__ = ["Row", "Rows", "SqlValue", "Storage", "chunked", "statement_verb"]
