"""``CloudflareStorage``: the storage port over a SQLite-backed Durable Object's ``ctx.storage``.

What this adapter relies on in workerd (each pinned by the workerd integration tests):

- ``ctx.storage.sql.exec(sql, *params)`` is synchronous and returns a cursor; rows are read at
  once and the cursor is dropped, because a live cursor can make later statements fail with
  ``SQLITE_LOCKED``. The billed ``rowsRead``/``rowsWritten`` are read from the JS cursor after the
  rows are consumed (the Python SDK wrapper caches attributes, so its copy may be stale).
- JS ``null`` reaches Python as ``pyodide.ffi.jsnull``; it is normalised to ``None`` in rows and
  in the alarm slot, and ``None`` parameters are bound as ``jsnull``.
- ``ctx.storage.transactionSync(fn)`` runs ``fn`` atomically; a Python exception inside rolls back
  and reaches us as a JS error. The original exception is kept and re-raised unchanged.
- ``setAlarm``/``deleteAlarm`` issued (not awaited) inside ``transactionSync`` commit or roll back
  with that transaction's SQL; outside a transaction, SQL and an alarm write in the same
  synchronous turn commit together. ``await ctx.storage.sync()`` is the durability barrier.
- The alarm slot cannot be read synchronously, so this adapter remembers the last value it wrote
  or read (``known_alarm``) and restores it when a transaction rolls back.

Measured in real workerd (``tests/workerd``: miniflare 4.20260426.0, Pyodide 314.0.7):

- An alarm written INSIDE ``transactionSync`` rolls back with it, including inside a nested
  transaction whose failure is caught (only the inner write is dropped). An alarm written right
  AFTER ``transactionSync`` returns commits with it when it succeeds, but when the transaction
  rolled back that alarm is committed on its own: a wake-up for work that does not exist.
  Hence every alarm write that belongs to SQL is issued inside the same ``transaction``.
- The alarm slot is empty inside the alarm handler (``getAlarm()`` answers null: the firing
  emptied it), stays empty after a handler that wrote nothing, and a ``setAlarm`` made during
  the handler is read back at once and survives the handler's end. So once the handler
  refreshed ``known_alarm`` it is exact until the handler ends, and a pass's final decision
  writes only what differs from it (``tests/workerd/test_workerd_alarm_slot.py``).
- ``rowsRead``/``rowsWritten`` count every index a write touches: an INSERT is 0/1 into a rowid
  table, 0/2 with a TEXT primary key (its implicit index), 0/3 with one more index; an INSERT
  with an explicit rowid 1/1; an UPDATE by key 1/1, or 1/2 when it changes an indexed column.
- The ``workers`` SDK wraps ``ctx.storage`` in a converting proxy. Through it, a ``setAlarm``
  that is not awaited leaves a never-awaited coroutine behind (a RuntimeWarning each time), and
  every ``transactionSync`` callback becomes a proxy that is never freed. So the adapter talks to
  the underlying JS object (``_binding``) and converts rows and ``null`` itself.

``pyodide`` is imported lazily so that importing this module works under CPython.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from threadline.errors import StorageError, StorageValueTooLarge, is_too_big
from threadline.storage.meter import Meter
from threadline.storage.port import Row, Rows, SqlValue, statement_verb

T = TypeVar("T")

#: Statements whose changed-row count is read back with ``changes()``, when asked for.
_CHANGING_VERBS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE"})
_CHANGES = "SELECT changes() AS n"


@functools.cache
def _jsnull() -> Any:
    # Cached: it is consulted for every value of every row.
    try:
        from pyodide import ffi
    except ImportError:  # pragma: no cover - only outside Pyodide
        return None
    return getattr(ffi, "jsnull", None)


def is_js_null(value: Any) -> bool:
    """Whether ``value`` is JavaScript's null or undefined as Python sees it: None, or
    pyodide's ``jsnull`` (only None outside Pyodide)."""
    if value is None:
        return True
    null = _jsnull()
    return null is not None and value is null





def _to_python(value: Any) -> Any:
    if is_js_null(value):
        return None
    if isinstance(value, int | float | str | bytes):
        return value
    to_py = getattr(value, "to_py", None)
    if to_py is not None:
        converted = to_py()
        if isinstance(converted, memoryview):
            return bytes(converted)
        return converted
    return value


def _to_row(raw: Any) -> Row:
    if isinstance(raw, dict):
        mapping = raw
    else:
        to_py = getattr(raw, "to_py", None)
        mapping = to_py() if to_py is not None else dict(raw)
    return {str(key): _to_python(value) for key, value in mapping.items()}


def _to_rows(raw: Any) -> list[Row]:
    """Every row of a ``toArray()`` as plain dicts, converted in one call; JS null becomes
    None and a blob ``bytes`` (as :func:`_to_row` does one row at a time)."""
    if isinstance(raw, list):  # already Python (a test double)
        return [_to_row(row) for row in raw]
    if not raw.length:
        return []
    converted = raw.to_py()
    null = _jsnull()
    for row in converted:
        for key, value in row.items():
            if value is None:
                continue
            if value is null:
                row[key] = None
            elif isinstance(value, memoryview):
                row[key] = bytes(value)
            elif not isinstance(value, int | float | str | bytes):
                row[key] = _to_python(value)
    return converted  # type: ignore[no-any-return]


#: Integers from here up to :data:`_MAX_SAFE` are exact as floats (2**52 and above).
_BIGINT_FROM = 2**52
_MAX_SAFE = 2**53 - 1


def _bind(value: SqlValue) -> Any:
    if value is None:
        null = _jsnull()
        return null
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, bytes):
        from pyodide.ffi import to_js

        return to_js(value)
    if isinstance(value, int) and _BIGINT_FROM < abs(value) <= _MAX_SAFE:
        # Pyodide hands the largest safe integers to JavaScript as BigInt, which the SQL
        # binding refuses; as a float each of them is exact and binds as a number.
        return float(value)
    return value


def _counter(cursor: Any, name: str) -> int:
    # The cursor comes from the JS binding itself (never the SDK's wrapper): no lookup of a
    # ``_binding`` first, which costs a failed JS property read per counter.
    value = getattr(cursor, name, 0)
    return 0 if is_js_null(value) else int(value)


class CloudflareStorage:
    """The storage port over ``ctx.storage`` of a SQLite-backed Durable Object."""

    def __init__(self, js_storage: Any) -> None:
        # ``ctx.storage`` as the SDK hands it over is a wrapper; use the JS object under it.
        self._storage = getattr(js_storage, "_binding", js_storage)
        self._sql = self._storage.sql
        self.meter = Meter(approximate=False)
        self._alarm: int | None = None
        self._alarm_writes = 0
        self._depth = 0
        #: Statements run through :meth:`exec`: a changed-row count is good until the next.
        self._statements = 0
        #: ``SELECT changes()`` reads so far (a figure for the profile of a pass).
        self.changes_read = 0
        #: after_commit callbacks, one list per open transaction level.
        self._after: list[list[Callable[[], None]]] = []

    def exec(self, sql: str, *params: SqlValue) -> Rows:
        """Run one statement, read every row, free the cursor and meter its billed cost."""
        cursor: Any = None
        try:
            cursor = self._sql.exec(sql, *[_bind(p) for p in params])
            # One crossing for every row (toArray) and one conversion of them all, rather
            # than a crossing per row and another per row's conversion.
            rows = _to_rows(cursor.toArray())
            read = _counter(cursor, "rowsRead")
            written = _counter(cursor, "rowsWritten")
        except Exception as exc:
            if is_too_big(str(exc)):
                raise StorageValueTooLarge(f"statement failed: {exc}") from exc
            raise StorageError(f"statement failed: {exc}") from exc
        finally:
            del cursor
        self.meter.record(read, written)
        self._statements += 1
        if statement_verb(sql) not in _CHANGING_VERBS:
            return Rows(rows, read, written)
        return Rows(rows, read, written, changes=self._count_of(self._statements))

    def _count_of(self, statement: int) -> Callable[[], int]:
        # The cursor has no changed-row count and rowsWritten also counts index entries, so a
        # compare-and-set asks SQLite; only when it asks (most writes never do), and while
        # SQLite's count is still that statement's.
        def count() -> int:
            if self._statements != statement:
                raise StorageError("a changed-row count was asked for after a later statement")
            return self._changes()

        return count

    def _changes(self) -> int:
        self.changes_read += 1
        cursor: Any = None
        try:
            cursor = self._sql.exec(_CHANGES)
            counted = _to_rows(cursor.toArray())
            read, written = _counter(cursor, "rowsRead"), _counter(cursor, "rowsWritten")
        except Exception as exc:
            raise StorageError(f"reading the changed-row count failed: {exc}") from exc
        finally:
            del cursor
        self.meter.record(read, written)
        return int(counted[0]["n"])

    def in_transaction(self) -> bool:
        """True while a ``transaction`` body is running."""
        return self._depth > 0

    def transaction(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` inside ``transactionSync``; its exception is re-raised unchanged."""
        outcome: dict[str, Any] = {}

        def body() -> None:
            try:
                outcome["result"] = fn()
            except BaseException as exc:
                outcome["error"] = exc
                raise

        saved_alarm = self._alarm
        self._depth += 1
        self._after.append([])
        try:
            self._storage.transactionSync(body)
        except BaseException as exc:
            self._alarm = saved_alarm
            self._after.pop()
            original = outcome.get("error")
            if original is not None:
                raise original from None
            raise StorageError(f"transaction failed: {exc}") from exc
        finally:
            self._depth -= 1
        committed = self._after.pop()
        if self._after:
            # A nested transaction returned: its callbacks wait for the outer one's fate.
            self._after[-1].extend(committed)
        else:
            for callback in committed:
                callback()
        return outcome["result"]  # type: ignore[no-any-return]

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the outermost transaction commits (see the port)."""
        if not self._after:
            raise StorageError("after_commit() needs a transaction")
        self._after[-1].append(callback)

    def set_alarm(self, epoch_ms: int) -> None:
        """Issue ``setAlarm``; it commits with the surrounding transaction or synchronous turn."""
        try:
            self._storage.setAlarm(int(epoch_ms))
        except Exception as exc:
            raise StorageError(f"setAlarm failed: {exc}") from exc
        self._alarm = int(epoch_ms)
        self._alarm_writes += 1
        self.meter.record_alarm_write()

    def delete_alarm(self) -> None:
        """Issue ``deleteAlarm``; it commits with the surrounding transaction or turn."""
        try:
            self._storage.deleteAlarm()
        except Exception as exc:
            raise StorageError(f"deleteAlarm failed: {exc}") from exc
        self._alarm = None
        self._alarm_writes += 1
        self.meter.record_alarm_write()

    def known_alarm(self) -> int | None:
        """The alarm slot as this object last wrote or read it."""
        return self._alarm

    async def get_alarm(self) -> int | None:
        """Ask workerd for the alarm slot and remember the answer.

        An alarm written while the read was in flight is newer than the answer, so the
        remembered value is then left as that write made it.
        """
        writes = self._alarm_writes
        try:
            value = await self._storage.getAlarm()
        except Exception as exc:
            raise StorageError(f"getAlarm failed: {exc}") from exc
        slot = None if is_js_null(value) else int(value)
        if self._alarm_writes == writes:
            self._alarm = slot
        return slot

    async def sync(self) -> None:
        """Wait until every write so far is durable."""
        try:
            await self._storage.sync()
        except Exception as exc:
            raise StorageError(f"sync failed: {exc}") from exc


__all__ = ["CloudflareStorage", "is_js_null"]
