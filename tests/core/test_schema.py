import pytest

from threadline.errors import SchemaError
from threadline.storage import MIGRATIONS, SCHEMA_VERSION, SqliteStorage, migrate, schema_version
from threadline.storage import schema as schema_module


def _objects(storage: SqliteStorage) -> set[tuple[str, str]]:
    rows = storage.exec(
        "SELECT type, name FROM sqlite_master WHERE name LIKE 'tl_%' AND type IN ('table', 'index')"
    )
    return {(row["type"], row["name"]) for row in rows}


def _dump(storage: SqliteStorage) -> list[tuple[str, str]]:
    rows = storage.exec("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
    return [(row["name"], row["sql"]) for row in rows]


EXPECTED_TABLES = {
    "tl_meta", "tl_lanes", "tl_maintenance", "tl_threads", "tl_submissions", "tl_journal",
    "tl_history", "tl_waits", "tl_abort_intents", "tl_outbox", "tl_messages",
}
EXPECTED_INDEXES = {
    "tl_lanes_due", "tl_submissions_open", "tl_waits_open", "tl_outbox_pending",
    "tl_messages_pending",
}


def test_fresh_database_gets_every_table_and_index(raw_storage: SqliteStorage) -> None:
    assert migrate(raw_storage) == SCHEMA_VERSION == len(MIGRATIONS)
    objects = _objects(raw_storage)
    assert {name for kind, name in objects if kind == "table"} >= EXPECTED_TABLES
    assert {name for kind, name in objects if kind == "index"} >= EXPECTED_INDEXES
    assert schema_version(raw_storage) == SCHEMA_VERSION


def test_migrating_twice_changes_nothing(raw_storage: SqliteStorage) -> None:
    migrate(raw_storage)
    before = _dump(raw_storage)
    rows = raw_storage.exec("SELECT * FROM tl_maintenance").rows
    assert migrate(raw_storage) == 0
    assert _dump(raw_storage) == before
    assert raw_storage.exec("SELECT * FROM tl_maintenance").rows == rows


@pytest.mark.parametrize("start", range(SCHEMA_VERSION))
def test_upgrade_from_every_earlier_version(start: int) -> None:
    upgraded = SqliteStorage(":memory:")
    migrate(upgraded, target=start)
    assert schema_version(upgraded) == start
    assert migrate(upgraded) == SCHEMA_VERSION - start
    fresh = SqliteStorage(":memory:")
    migrate(fresh)
    assert _dump(upgraded) == _dump(fresh)


def test_new_object_starts_dirty(storage: SqliteStorage) -> None:
    row = storage.exec("SELECT dirty, processed, nonterminal FROM tl_maintenance").one()
    assert row == {"dirty": 1, "processed": 0, "nonterminal": 0}


def test_check_constraints_refuse_bad_states(storage: SqliteStorage) -> None:
    from threadline.errors import StorageError

    with pytest.raises(StorageError, match="CHECK"):
        storage.exec("INSERT INTO tl_lanes (id, state) VALUES ('x', 'sleeping')")
    with pytest.raises(StorageError, match="CHECK"):
        storage.exec("INSERT INTO tl_lanes (id, due_at, state) VALUES ('x', NULL, 'due')")
    with pytest.raises(StorageError, match="CHECK"):
        storage.exec("UPDATE tl_maintenance SET retry_stalls = 31, retry_generation = 1, "
                     "retry_not_before = 0, retry_native_only = 0")
    with pytest.raises(StorageError, match="CHECK"):
        storage.exec("UPDATE tl_maintenance SET processed = dirty + 1")
    storage.exec("INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 0, 0)")
    insert = ("INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key, input_json,"
              " input_digest, state, created_at, updated_at) VALUES (?, 't', ?, 'a', ?, '{}', 'd',"
              " 'queued', 0, 0)")
    storage.exec(insert, "s1", 1, "k")
    with pytest.raises(StorageError, match="UNIQUE"):
        storage.exec(insert, "s2", 2, "k")
    with pytest.raises(StorageError, match="UNIQUE"):
        storage.exec(insert, "s3", 1, None)
    with pytest.raises(StorageError, match="CHECK"):
        storage.exec("UPDATE tl_submissions SET state = 'settled' WHERE id = 's1'")


def test_open_submission_scans_use_the_partial_index(storage: SqliteStorage) -> None:
    plan = storage.exec(
        "EXPLAIN QUERY PLAN SELECT id FROM tl_submissions WHERE state <> 'settled' "
        "ORDER BY thread_id, seq"
    )
    assert any("tl_submissions_open" in row["detail"] for row in plan)
    plan = storage.exec(
        "EXPLAIN QUERY PLAN SELECT id, due_at FROM tl_lanes WHERE due_at IS NOT NULL "
        "ORDER BY due_at LIMIT 1"
    )
    assert any("tl_lanes_due" in row["detail"] for row in plan)


def test_a_newer_database_is_refused_untouched(storage: SqliteStorage) -> None:
    storage.exec("UPDATE tl_meta SET schema_version = ?", SCHEMA_VERSION + 1)
    with pytest.raises(SchemaError, match="newer"):
        migrate(storage)
    assert schema_version(storage) == SCHEMA_VERSION + 1


def test_a_failing_migration_leaves_the_previous_version(
    raw_storage: SqliteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = [*MIGRATIONS, ("CREATE TABLE tl_extra (id INTEGER)", "SELECT * FROM nowhere")]
    monkeypatch.setattr(schema_module, "MIGRATIONS", broken)
    monkeypatch.setattr(schema_module, "SCHEMA_VERSION", len(broken))
    with pytest.raises(SchemaError, match=f"migration {len(MIGRATIONS)} -> "):
        schema_module.migrate(raw_storage)
    assert schema_version(raw_storage) == len(MIGRATIONS)
    assert ("table", "tl_extra") not in _objects(raw_storage)
