import asyncio
from pathlib import Path

import pytest

from threadline.errors import Evicted, StorageError
from threadline.storage import SqliteStorage


def _table(storage: SqliteStorage) -> None:
    storage.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")


def test_exec_materialises_rows_as_dicts(raw_storage: SqliteStorage) -> None:
    _table(raw_storage)
    raw_storage.exec("INSERT INTO t (id, v) VALUES (?, ?), (?, ?)", 1, "a", 2, None)
    rows = raw_storage.exec("SELECT id, v FROM t ORDER BY id")
    assert rows.rows == [{"id": 1, "v": "a"}, {"id": 2, "v": None}]
    assert rows.first() == {"id": 1, "v": "a"}
    assert raw_storage.exec("SELECT count(*) AS n FROM t").scalar() == 2
    with pytest.raises(StorageError, match="exactly one row"):
        rows.one()


def test_transaction_rollback_leaves_no_rows_and_no_alarm_change(
    raw_storage: SqliteStorage,
) -> None:
    _table(raw_storage)
    raw_storage.set_alarm(1_000)

    def body() -> None:
        raw_storage.exec("INSERT INTO t (v) VALUES ('x')")
        raw_storage.set_alarm(5)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        raw_storage.transaction(body)
    assert raw_storage.exec("SELECT count(*) FROM t").scalar() == 0
    assert raw_storage.known_alarm() == 1_000
    assert not raw_storage.in_transaction()


def test_evicted_inside_a_transaction_rolls_back_too(raw_storage: SqliteStorage) -> None:
    _table(raw_storage)

    def body() -> None:
        raw_storage.exec("INSERT INTO t (v) VALUES ('x')")
        raw_storage.delete_alarm()
        raise Evicted("test")

    raw_storage.set_alarm(42)
    with pytest.raises(Evicted):
        raw_storage.transaction(body)
    assert raw_storage.exec("SELECT count(*) FROM t").scalar() == 0
    assert raw_storage.known_alarm() == 42


def test_nested_failure_drops_only_the_inner_work(raw_storage: SqliteStorage) -> None:
    _table(raw_storage)

    def inner() -> None:
        raw_storage.exec("INSERT INTO t (v) VALUES ('inner')")
        raw_storage.set_alarm(9)
        raise ValueError("inner failed")

    def outer() -> str:
        raw_storage.exec("INSERT INTO t (v) VALUES ('outer')")
        raw_storage.set_alarm(7)
        with pytest.raises(ValueError):
            raw_storage.transaction(inner)
        assert raw_storage.in_transaction()
        return "done"

    assert raw_storage.transaction(outer) == "done"
    assert [r["v"] for r in raw_storage.exec("SELECT v FROM t")] == ["outer"]
    assert raw_storage.known_alarm() == 7


def test_alarm_slot_set_get_delete_commit_with_sql(raw_storage: SqliteStorage) -> None:
    _table(raw_storage)
    assert asyncio.run(raw_storage.get_alarm()) is None

    def body() -> None:
        raw_storage.exec("INSERT INTO t (v) VALUES ('fact')")
        raw_storage.set_alarm(123)

    raw_storage.transaction(body)
    assert asyncio.run(raw_storage.get_alarm()) == 123
    raw_storage.transaction(raw_storage.delete_alarm)
    assert raw_storage.known_alarm() is None
    assert raw_storage.meter.alarm_writes == 2


def test_platform_firing_empties_only_a_due_slot(raw_storage: SqliteStorage) -> None:
    raw_storage.set_alarm(100)
    assert raw_storage.take_due_alarm(99) is None
    assert raw_storage.known_alarm() == 100
    assert raw_storage.take_due_alarm(150) == 100
    assert raw_storage.known_alarm() is None


def test_async_transaction_bodies_are_refused(raw_storage: SqliteStorage) -> None:
    _table(raw_storage)

    async def body() -> None:
        raw_storage.exec("INSERT INTO t (v) VALUES ('x')")

    with pytest.raises(StorageError, match="synchronous"):
        raw_storage.transaction(body)  # type: ignore[arg-type]
    assert raw_storage.exec("SELECT count(*) FROM t").scalar() == 0


def test_sql_errors_map_to_storage_error(raw_storage: SqliteStorage) -> None:
    with pytest.raises(StorageError, match="no such table") as info:
        raw_storage.exec("SELECT * FROM missing")
    assert info.value.__cause__ is not None


def test_text_without_a_utf8_form_is_a_storage_error(raw_storage: SqliteStorage) -> None:
    _table(raw_storage)
    with pytest.raises(StorageError, match="statement failed"):
        raw_storage.exec("INSERT INTO t (v) VALUES (?)", "\ud800")
    assert raw_storage.exec("SELECT count(*) FROM t").scalar() == 0


def test_meter_counts_statements_and_rows(raw_storage: SqliteStorage) -> None:
    _table(raw_storage)
    before = raw_storage.meter.reading()
    raw_storage.exec("INSERT INTO t (v) VALUES ('a'), ('b'), ('c')")
    raw_storage.exec("SELECT * FROM t")
    raw_storage.exec("UPDATE t SET v = 'z' WHERE id = 1")
    raw_storage.exec("DELETE FROM t WHERE id > 1")
    cost = raw_storage.meter.reading() - before
    assert cost.statements == 4
    assert cost.rows_written == 3 + 1 + 2
    assert cost.rows_read == 3 + 1 + 2
    assert cost.approximate


def test_vm_steps_grow_with_rows_examined() -> None:
    storage = SqliteStorage(":memory:", count_vm_steps=True)
    storage.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
    storage.exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000) "
        "INSERT INTO t (id, v) SELECT i, i FROM n"
    )
    storage.vm_steps = 0
    storage.exec("SELECT v FROM t WHERE id = 4000")
    by_key = storage.vm_steps
    storage.vm_steps = 0
    storage.exec("SELECT id FROM t WHERE v = 4000")
    assert storage.vm_steps > 20 * max(by_key, 64)


def test_file_database_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "object.sqlite"
    first = SqliteStorage(path)
    _table(first)
    first.transaction(lambda: (first.exec("INSERT INTO t (v) VALUES ('kept')"), first.set_alarm(5)))
    first.close()
    second = SqliteStorage(path)
    assert second.exec("SELECT v FROM t").scalar() == "kept"
    assert second.known_alarm() == 5
    assert second.exec("PRAGMA journal_mode").scalar() == "wal"
    second.close()


def test_after_commit_runs_once_the_outermost_transaction_commits(
    raw_storage: SqliteStorage,
) -> None:
    seen: list[str] = []

    def note(name: str) -> None:
        raw_storage.after_commit(lambda: seen.append(name))

    def inner_refused() -> None:
        note("inner-refused")
        raise RuntimeError("refused")

    def outer() -> None:
        note("outer")
        raw_storage.transaction(lambda: note("inner"))
        with pytest.raises(RuntimeError):
            raw_storage.transaction(inner_refused)
        assert seen == []  # nothing has committed yet

    raw_storage.transaction(outer)
    assert seen == ["outer", "inner"]

    def outer_refused() -> None:
        raw_storage.transaction(lambda: note("lost"))
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        raw_storage.transaction(outer_refused)
    assert seen == ["outer", "inner"]
    with pytest.raises(StorageError, match="transaction"):
        raw_storage.after_commit(lambda: None)
