"""``SqliteStorage``: the storage port over CPython's ``sqlite3``.

It is the embedded backend for tests and ``threadline.testing``: one database file per object
(or ``:memory:``), in WAL mode. The alarm slot lives in a table of the same database, so an
alarm written inside a transaction commits or rolls back with the SQL around it, as on
Cloudflare.
"""

from __future__ import annotations

import inspect
import itertools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from threadline.errors import StorageError, StorageValueTooLarge
from threadline.storage.meter import Meter
from threadline.storage.port import Rows, SqlValue, statement_verb

T = TypeVar("T")

_SLOT_TABLE = (
    "CREATE TABLE IF NOT EXISTS tl_platform_alarm ("
    "id INTEGER PRIMARY KEY CHECK (id = 1), at INTEGER NOT NULL)"
)
_SLOT_READ = "SELECT at FROM tl_platform_alarm WHERE id = 1"
_SLOT_WRITE = (
    "INSERT INTO tl_platform_alarm (id, at) VALUES (1, ?) "
    "ON CONFLICT (id) DO UPDATE SET at = excluded.at"
)
_SLOT_DELETE = "DELETE FROM tl_platform_alarm WHERE id = 1"
_READING_VERBS = ("UPDATE", "DELETE")
#: Statements with a changed-row count.
_CHANGING_VERBS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE"})
_VM_STEP_GRANULARITY = 64


class SqliteStorage:
    """The storage port on a local SQLite database.

    Its meter is approximate (``meter.approximate`` is True): rows read are the rows returned
    plus the rows an UPDATE or DELETE changed, rows written are SQLite's change count. Index
    updates are not counted. With ``count_vm_steps=True`` it also counts SQLite virtual-machine
    steps in ``vm_steps`` (in units of 64), which grows with the rows a statement examines even
    when it returns few: the honest way to show that a query uses an index here.
    ``max_length`` caps the bytes of one string or blob as the platform's row limit does (a
    longer one raises :class:`~threadline.errors.StorageValueTooLarge`).
    """

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        count_vm_steps: bool = False,
        max_length: int | None = None,
    ) -> None:
        self.path = str(path)
        self.meter = Meter(approximate=True)
        self.vm_steps = 0
        self._savepoints = itertools.count(1)
        self._depth = 0
        #: Statements run so far: a changed-row count is good until the next one.
        self._statements = 0
        #: after_commit callbacks, one list per open transaction level.
        self._after: list[list[Callable[[], None]]] = []
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None)
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute(_SLOT_TABLE)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open database {self.path!r}: {exc}") from exc
        self._conn.row_factory = sqlite3.Row
        if max_length is not None:
            # Imitates the platform's row limit: a longer string or blob is refused with
            # SQLITE_TOOBIG, as Cloudflare refuses one over 2 MB.
            self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_length)
        if count_vm_steps:
            self._conn.set_progress_handler(self._count_step, _VM_STEP_GRANULARITY)

    def _count_step(self) -> int:
        self.vm_steps += _VM_STEP_GRANULARITY
        return 0

    def close(self) -> None:
        """Close the connection; the file (if any) keeps every committed write."""
        self._conn.close()

    def exec(self, sql: str, *params: SqlValue) -> Rows:
        """Run one statement and return its rows, fully materialised."""
        before = self._conn.total_changes
        try:
            cursor = self._conn.execute(sql, params)
            fetched = cursor.fetchall()
            cursor.close()
        except sqlite3.DataError as exc:
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_TOOBIG":
                raise StorageValueTooLarge(f"statement failed: {exc}") from exc
            raise StorageError(f"statement failed: {exc}") from exc
        except (sqlite3.Error, UnicodeEncodeError) as exc:
            # A str with a lone surrogate has no UTF-8 form: sqlite3 refuses to bind it.
            raise StorageError(f"statement failed: {exc}") from exc
        written = self._conn.total_changes - before
        rows = [dict(row) for row in fetched]
        read = len(rows) + (written if statement_verb(sql) in _READING_VERBS else 0)
        self.meter.record(read, written)
        self._statements += 1
        if statement_verb(sql) not in _CHANGING_VERBS:
            return Rows(rows, read, written)
        return Rows(rows, read, written, changes=self._count_of(self._statements, written))

    def _count_of(self, statement: int, written: int) -> Callable[[], int]:
        # The count is known at once here; it is handed out as Cloudflare hands it out (read
        # on demand, only until the next statement) so that code asking for it too late fails
        # in these tests rather than in workerd.
        def count() -> int:
            if self._statements != statement:
                raise StorageError("a changed-row count was asked for after a later statement")
            return written

        return count

    def in_transaction(self) -> bool:
        """True while a ``transaction`` body is running."""
        return self._depth > 0

    def transaction(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` atomically; nested calls become savepoints of the outer transaction."""
        name = f"tl_sp_{next(self._savepoints)}"
        self._raw(f"SAVEPOINT {name}")
        self._depth += 1
        self._after.append([])
        try:
            result = fn()
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise StorageError("a transaction body must be synchronous")
        except BaseException:
            self._depth -= 1
            self._after.pop()
            self._raw(f"ROLLBACK TO {name}")
            self._raw(f"RELEASE {name}")
            raise
        self._depth -= 1
        committed = self._after.pop()
        self._raw(f"RELEASE {name}")
        if self._after:
            # A savepoint released: its callbacks wait for the outer transaction's fate.
            self._after[-1].extend(committed)
        else:
            for callback in committed:
                callback()
        return result

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the outermost transaction commits (see the port)."""
        if not self._after:
            raise StorageError("after_commit() needs a transaction")
        self._after[-1].append(callback)

    def set_alarm(self, epoch_ms: int) -> None:
        """Replace the alarm slot; committed with the SQL around it."""
        self._raw(_SLOT_WRITE, (int(epoch_ms),))
        self.meter.record_alarm_write()

    def delete_alarm(self) -> None:
        """Empty the alarm slot; committed with the SQL around it."""
        self._raw(_SLOT_DELETE)
        self.meter.record_alarm_write()

    def known_alarm(self) -> int | None:
        """The alarm slot; here the table is the slot itself, so this is always exact."""
        row = self._conn.execute(_SLOT_READ).fetchone()
        return None if row is None else int(row[0])

    def take_due_alarm(self, now_ms: int) -> int | None:
        """Do what the platform does when the alarm fires: empty a slot due at ``now_ms``,
        before the handler runs (so a handler that writes nothing leaves it empty).

        Returns the deadline that fired, or None when the slot is empty or not yet due.
        Used by the simulated object to deliver alarms like Cloudflare does.
        """
        due = self.known_alarm()
        if due is None or due > now_ms:
            return None
        self._raw(_SLOT_DELETE)
        return due

    async def get_alarm(self) -> int | None:
        """The alarm slot."""
        return self.known_alarm()

    async def sync(self) -> None:
        """Every committed write is already durable in SQLite; nothing to wait for."""

    def _raw(self, sql: str, params: tuple[SqlValue, ...] = ()) -> None:
        try:
            self._conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise StorageError(f"storage control statement failed: {exc}") from exc


__all__ = ["SqliteStorage"]
