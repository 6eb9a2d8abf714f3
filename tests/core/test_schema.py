import re

import pytest

from threadline.errors import SchemaError, StorageError
from threadline.storage import MIGRATIONS, SCHEMA_VERSION, SqliteStorage, migrate, schema_version
from threadline.storage import schema as schema_module
from threadline.threads import waits as waits_module


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
    "tl_history", "tl_waits", "tl_abort_intents", "tl_messages", "tl_schedules",
    "tl_subscribers", "tl_message_targets", "tl_revocations",
}
#: Tables a later migration drops, by the migration that drops them.
DROPPED = {"tl_outbox": schema_module._ONE_LOG}
EXPECTED_INDEXES = {
    "tl_lanes_due", "tl_submissions_open", "tl_waits_open",
    "tl_messages_queue", "tl_message_targets_due", "tl_subscribers_parked",
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
        "EXPLAIN QUERY PLAN SELECT DISTINCT thread_id FROM tl_submissions "
        "WHERE settled_at IS NULL AND dormant = 0 ORDER BY thread_id"
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


#: Rows each schema version can hold, written with that version's columns only. A version's
#: rows are written at every start version that has its tables.
SEEDS: dict[int, tuple[tuple[str, tuple[object, ...]], ...]] = {
    1: (
        ("INSERT INTO tl_lanes (id, due_at, not_before, revision, stalls, state, reported,"
         " cursor) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ("alpha", 50, 40, 3, 2, "parked", 1, 9)),
        ("INSERT INTO tl_lanes (id) VALUES (?)", ("idle.lane",)),
        ("UPDATE tl_maintenance SET dirty = ?, processed = ?, last_served_thread = ?,"
         " retry_generation = ?, retry_not_before = ?, retry_native_only = ?, retry_stalls = ?",
         (7, 5, "t", 6, 1234, 1, 2)),
    ),
    2: (
        ("INSERT INTO tl_threads (id, next_seq, history_seq, created_at, updated_at)"
         " VALUES (?, ?, ?, ?, ?)", ("t", 3, 1, 10, 11)),
        ("INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key, input_json,"
         " input_digest, state, outcome, result_json, attempts, revision, created_at,"
         " updated_at, settled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
         ("s1", "t", 1, "echo", "k1", '{"a":1}', "d1", "settled", "completed", '"ok"', 1, 3,
          10, 12, 12)),
        ("INSERT INTO tl_submissions (id, thread_id, seq, agent, input_json, input_digest, state,"
         " attempts, revision, lease_owner, lease_expires_at, created_at, updated_at)"
         " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
         ("s2", "t", 2, "echo", "null", "d2", "running", 1, 1, "lease_x", 99, 10, 13)),
        ("INSERT INTO tl_journal (submission_id, step_key, position, effect, state, attempt,"
         " value_json, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
         ("s2", "step:pay", 1, "uncertain", "started", 1, None, 13, None)),
        ("INSERT INTO tl_history (thread_id, seq, record_id, submission_id, kind, body_json,"
         " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
         ("t", 1, "s1:emit", "s1", "record", '{"x":1}', 11)),
        ("INSERT INTO tl_waits (id, submission_id, kind, wait_key, state, payload_json,"
         " wake_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
         ("w1", "s2", "timer", "sleep", "open", None, 500, 13)),
        ("INSERT INTO tl_abort_intents (submission_id, state, reason, requested_at)"
         " VALUES (?, ?, ?, ?)", ("s2", "accepted", "stop", 14)),
        ("INSERT INTO tl_outbox (record_id, thread_id, kind, body_json, created_at)"
         " VALUES (?, ?, ?, ?, ?)", ("s1:settled", "t", "submission.settled", "{}", 12)),
        ("INSERT INTO tl_messages (id, from_thread, from_submission, to_space, to_thread,"
         " input_json, next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
         ("m1", "t", "s1", "other", "t9", "{}", 20, 11)),
    ),
}


def _tables(storage: SqliteStorage) -> list[str]:
    rows = storage.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tl_%'"
                        " AND name NOT IN ('tl_meta', 'tl_platform_alarm') ORDER BY name")
    return [row["name"] for row in rows]


def _rows(storage: SqliteStorage, table: str, columns: list[str]) -> list[dict[str, object]]:
    # Table and column names come from sqlite_master of the test's own database.
    listed = ", ".join(f'"{column}"' for column in columns)
    rows = storage.exec(f'SELECT {listed} FROM "{table}" ORDER BY {listed}').rows
    return rows


def _seeded_table(statement: str) -> str:
    return re.match(r"(?:INSERT INTO|UPDATE) (\w+)", statement).group(1)  # type: ignore[union-attr]


def test_the_seeds_cover_every_version_and_table() -> None:
    assert set(SEEDS) <= set(range(1, SCHEMA_VERSION + 1))
    storage = SqliteStorage(":memory:")
    migrate(storage, target=max(SEEDS))
    seeded = {re.match(r"(?:INSERT INTO|UPDATE) (\w+)", statement).group(1)  # type: ignore[union-attr]
              for version in SEEDS for statement, _ in SEEDS[version]}
    assert seeded == set(_tables(storage))


@pytest.mark.parametrize("start", range(1, SCHEMA_VERSION))
def test_rows_written_at_an_earlier_version_survive_every_later_migration(start: int) -> None:
    storage = SqliteStorage(":memory:")
    migrate(storage, target=start)
    present = set(_tables(storage))
    for version in sorted(v for v in SEEDS if v <= start):
        for statement, params in SEEDS[version]:
            # A table dropped by then holds nothing to carry on.
            if _seeded_table(statement) in present:
                storage.exec(statement, *params)
    written = {}
    for table in _tables(storage):
        columns = [row["name"] for row in storage.exec(f'PRAGMA table_info("{table}")')]
        written[table] = (columns, _rows(storage, table, columns))
    assert migrate(storage) == SCHEMA_VERSION - start
    remaining = set(_tables(storage))
    for table, (columns, rows) in written.items():
        if table not in remaining:
            # Only a table a migration after ``start`` drops on purpose may be gone.
            assert MIGRATIONS.index(DROPPED[table]) >= start, table
            continue
        # Every column the row had still holds what was written; later columns may be added.
        assert _rows(storage, table, columns) == rows, table
    assert storage.exec("PRAGMA foreign_key_check").rows == []


def test_lean_rows_migration_keeps_every_outbox_record_and_pass_report() -> None:
    lean = MIGRATIONS.index(schema_module._LEAN_ROWS)
    storage = SqliteStorage(":memory:")
    migrate(storage, target=lean)
    for n in range(1, 4):
        storage.exec(
            "INSERT INTO tl_outbox (record_id, thread_id, kind, body_json, state, attempts,"
            " created_at, delivered_at) VALUES (?, 't', 'record', ?, ?, ?, ?, ?)",
            f"r{n}", f'{{"n":{n}}}', "delivered" if n == 1 else "pending", n, 10 + n,
            20 if n == 1 else None)
        storage.exec(
            "INSERT INTO tl_pass_reports (started_at, phase, recovered, settled, dispatched,"
            " nonterminal, alarm, alarm_at, rows_read, rows_written, statements, duration_ms,"
            " failure_type, failure_message) VALUES (?, ?, 0, ?, 1, 0, 'rearmed', ?, 5, 6, 7,"
            " 1, ?, ?)",
            100 + n, "failed" if n == 3 else "actionable", n, 200 + n,
            "StorageError" if n == 3 else None, "boom" if n == 3 else None)
    # A trimmed report: its seq is not reused, since the newest row is never deleted.
    storage.exec("DELETE FROM tl_pass_reports WHERE seq = 1")
    tables = ("tl_outbox", "tl_pass_reports")
    before = {table: storage.exec(f"SELECT * FROM {table} ORDER BY seq").rows for table in tables}
    # Up to the migration that drops the outbox.
    one_log = MIGRATIONS.index(schema_module._ONE_LOG)
    assert migrate(storage, target=one_log) == one_log - lean
    for table in tables:
        assert storage.exec(f"SELECT * FROM {table} ORDER BY seq").rows == before[table], table
    names = {row["name"] for row in storage.exec("SELECT name FROM sqlite_master")}
    assert not {"tl_outbox_old", "tl_pass_reports_old", "tl_outbox_pending"} & names
    sql = {row["name"]: row["sql"] for row in storage.exec(
        "SELECT name, sql FROM sqlite_master WHERE name IN ('tl_outbox', 'tl_pass_reports')")}
    assert all("AUTOINCREMENT" not in text for text in sql.values())
    storage.exec("INSERT INTO tl_outbox (record_id, thread_id, kind, body_json, created_at)"
                 " VALUES ('r4', 't', 'record', '{}', 14)")
    assert storage.exec("SELECT seq FROM tl_outbox WHERE record_id = 'r4'").scalar() == 4
    assert storage.exec("SELECT max(seq) FROM tl_pass_reports").scalar() == 3


def test_the_one_log_migration_drops_the_outbox_and_keeps_the_thread_logs() -> None:
    one_log = MIGRATIONS.index(schema_module._ONE_LOG)
    storage = SqliteStorage(":memory:")
    migrate(storage, target=one_log)
    storage.exec("INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
    storage.exec("INSERT INTO tl_history (thread_id, seq, record_id, submission_id, kind,"
                 " body_json, created_at) VALUES ('t', 1, 's1:emit:0', 's1', 'record', '{}', 5)")
    storage.exec("INSERT INTO tl_outbox (record_id, thread_id, kind, body_json, created_at)"
                 " VALUES ('s1:settled', 't', 'submission.settled', '{}', 6)")
    before = storage.exec("SELECT * FROM tl_history").rows
    assert migrate(storage, target=one_log + 1) == 1
    assert "tl_outbox" not in _tables(storage)
    # Dropped, not moved: the log's seqs and records are as they were.
    assert storage.exec("SELECT * FROM tl_history").rows == before


def test_the_lean_history_rebuild_keeps_the_log_and_marks_what_may_have_been_claimed() -> None:
    lean = MIGRATIONS.index(schema_module._LEAN_HISTORY)
    storage = SqliteStorage(":memory:")  # foreign keys are enforced, as on workerd
    migrate(storage, target=lean)
    storage.exec("INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
    states = ["queued", "ready", "running", "suspended", "settled"]
    for seq, state in enumerate(states, start=1):
        settled = state == "settled"
        storage.exec(
            "INSERT INTO tl_submissions (id, thread_id, seq, agent, input_json, input_digest,"
            " state, dormant, outcome, lease_owner, lease_expires_at, created_at, updated_at,"
            " settled_at) VALUES (?, 't', ?, 'echo', '{}', 'd', ?, ?, ?, ?, ?, 1, 1, ?)",
            f"s{seq}", seq, state, int(state == "suspended"), "completed" if settled else None,
            "lease" if state == "running" else None, 9 if state == "running" else None,
            5 if settled else None)
    for seq in (1, 2, 3):
        storage.exec("INSERT INTO tl_history (thread_id, seq, record_id, submission_id, kind,"
                     " body_json, created_at) VALUES ('t', ?, ?, ?, 'record', ?, ?)",
                     seq, f"s{seq + 1}:emit", f"s{seq + 1}", f'{{"n":{seq}}}', 10 + seq)
    before = storage.exec("SELECT * FROM tl_history ORDER BY seq").rows
    assert migrate(storage, target=lean + 1) == 1
    assert storage.exec("SELECT * FROM tl_history ORDER BY seq").rows == before
    assert storage.exec("PRAGMA foreign_key_check").rows == []
    assert "tl_history_old" not in _tables(storage)
    # Open and possibly claimed: read their Thread's log from its start. Never claimed (a
    # claim never makes one queued again) or settled: nothing to find.
    marks = {row["id"]: row["history_from"] for row in storage.exec(
        "SELECT id, history_from FROM tl_submissions")}
    assert marks == {"s1": None, "s2": 0, "s3": 0, "s4": 0, "s5": None}
    # Ids are the writers' to keep unique now: the log no longer refuses one.
    storage.exec("INSERT INTO tl_history (thread_id, seq, record_id, submission_id, kind,"
                 " body_json, created_at) VALUES ('t', 4, 's2:emit', 's2', 'record', '{}', 20)")


def test_lean_submissions_rebuild_keeps_every_row_and_its_foreign_keys() -> None:
    rebuild = MIGRATIONS.index(schema_module._LEAN_SUBMISSIONS)
    storage = SqliteStorage(":memory:")  # foreign keys are enforced, as on workerd
    migrate(storage, target=rebuild)
    storage.exec("INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
    states = ["queued", "ready", "running", "suspended", "unknown", "joined", "terminalizing",
              "settled"]
    for seq, state in enumerate(states, start=1):
        settled = state == "settled"
        storage.exec(
            "INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key, input_json,"
            " input_digest, state, outcome, result_json, attempts, revision, lease_owner,"
            " lease_expires_at, not_before, created_at, updated_at, settled_at)"
            " VALUES (?, 't', ?, 'echo', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            f"s{seq}", seq, f"k{seq}" if seq % 2 else None, f'{{"n":{seq}}}', f"d{seq}", state,
            "completed" if settled else None, '"ok"' if settled else None, seq, 2 * seq,
            "lease" if state == "running" else None, 99 if state == "running" else None,
            7 if state == "ready" else None, 10 + seq, 20 + seq, 30 if settled else None)
        storage.exec(
            "INSERT INTO tl_journal (submission_id, step_key, position, effect, state, attempt,"
            " started_at) VALUES (?, 'step', 0, 'idempotent', 'started', 1, 5)", f"s{seq}")
    storage.exec("INSERT INTO tl_waits (id, submission_id, kind, wait_key, state, wake_at,"
                 " created_at) VALUES ('w', 's4', 'timer', 'nap', 'open', 50, 5)")
    storage.exec("INSERT INTO tl_abort_intents (submission_id, state, requested_at)"
                 " VALUES ('s3', 'accepted', 6)")
    before = storage.exec("SELECT * FROM tl_submissions ORDER BY id").rows
    # Through the rebuild only: later migrations may add columns of their own.
    assert migrate(storage, target=rebuild + 1) == 1
    after = storage.exec("SELECT * FROM tl_submissions ORDER BY id").rows
    assert [{k: v for k, v in row.items() if k != "dormant"} for row in after] == before
    assert {row["state"]: row["dormant"] for row in after} == {
        state: int(state in ("suspended", "unknown", "joined")) for state in states}
    assert storage.exec("PRAGMA foreign_key_check").rows == []
    assert "tl_submissions_copy" not in {row["name"] for row in storage.exec(
        "SELECT name FROM sqlite_master")}
    # The children's keys point at the rebuilt table: a referenced row cannot go.
    with pytest.raises(StorageError, match="FOREIGN KEY"):
        storage.exec("DELETE FROM tl_submissions WHERE id = 's4'")
    live = storage.exec("SELECT id FROM tl_submissions WHERE settled_at IS NULL AND dormant = 0"
                        " ORDER BY seq").rows
    assert [row["id"] for row in live] == ["s1", "s2", "s3", "s7"]


@pytest.mark.parametrize("child", ["tl_journal", "tl_waits", "tl_abort_intents"])
def test_a_rebuild_that_orphans_a_child_fails_and_keeps_the_old_version(
    child: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebuild = MIGRATIONS.index(schema_module._LEAN_SUBMISSIONS)
    storage = SqliteStorage(":memory:")
    migrate(storage, target=rebuild)
    storage.exec("INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
    for seq in (1, 2, 3):
        storage.exec(
            "INSERT INTO tl_submissions (id, thread_id, seq, agent, input_json, input_digest,"
            " state, created_at, updated_at) VALUES (?, 't', ?, 'echo', '{}', 'd', 'running',"
            " 1, 1)", f"s{seq}", seq)
    # Each submission has one kind of child, so each child table's check is needed on its own.
    storage.exec("INSERT INTO tl_journal (submission_id, step_key, position, effect, state,"
                 " attempt, started_at) VALUES ('s1', 'step', 0, 'idempotent', 'started', 1, 5)")
    storage.exec("INSERT INTO tl_waits (id, submission_id, kind, wait_key, state, wake_at,"
                 " created_at) VALUES ('w', 's2', 'timer', 'nap', 'open', 50, 5)")
    storage.exec("INSERT INTO tl_abort_intents (submission_id, state, requested_at)"
                 " VALUES ('s3', 'accepted', 6)")
    orphaned = {"tl_journal": "s1", "tl_waits": "s2", "tl_abort_intents": "s3"}[child]
    # The copy-back loses the one submission this child hangs on.
    statements = tuple(
        f"{statement} WHERE id <> '{orphaned}'"
        if statement.startswith("INSERT INTO tl_submissions ") else statement
        for statement in MIGRATIONS[rebuild]
    )
    assert statements != MIGRATIONS[rebuild]
    patched = [*MIGRATIONS]
    patched[rebuild] = statements
    monkeypatch.setattr(schema_module, "MIGRATIONS", patched)
    tables = ("tl_submissions", "tl_journal", "tl_waits", "tl_abort_intents")
    before = {table: storage.exec(f"SELECT * FROM {table} ORDER BY 1").rows for table in tables}
    schema = _dump(storage)
    with pytest.raises(SchemaError, match=f"migration {rebuild} -> .*FOREIGN KEY"):
        migrate(storage)
    assert schema_version(storage) == rebuild
    assert _dump(storage) == schema
    for table in tables:
        assert storage.exec(f"SELECT * FROM {table} ORDER BY 1").rows == before[table], table


def test_held_followers_rebuild_keeps_every_row_and_lets_only_queued_input_be_held() -> None:
    rebuild = MIGRATIONS.index(schema_module._HELD_FOLLOWERS)
    storage = SqliteStorage(":memory:")  # foreign keys are enforced, as on workerd
    migrate(storage, target=rebuild)
    storage.exec("INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
    states = ["queued", "ready", "running", "suspended", "unknown", "joined", "terminalizing",
              "settled"]
    for seq, state in enumerate(states, start=1):
        settled = state == "settled"
        storage.exec(
            "INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key, input_json,"
            " input_digest, state, dormant, outcome, result_json, attempts, revision,"
            " lease_owner, lease_expires_at, not_before, created_at, updated_at, settled_at)"
            " VALUES (?, 't', ?, 'echo', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            f"s{seq}", seq, f"k{seq}" if seq % 2 else None, f'{{"n":{seq}}}', f"d{seq}", state,
            int(state in ("suspended", "unknown", "joined")), "completed" if settled else None,
            '"ok"' if settled else None, seq, 2 * seq, "lease" if state == "running" else None,
            99 if state == "running" else None, 7 if state == "ready" else None, 10 + seq,
            20 + seq, 30 if settled else None)
    storage.exec("INSERT INTO tl_waits (id, submission_id, kind, wait_key, state, wake_at,"
                 " created_at) VALUES ('w', 's4', 'timer', 'nap', 'open', 50, 5)")
    before = storage.exec("SELECT * FROM tl_submissions ORDER BY id").rows
    assert migrate(storage, target=rebuild + 1) == 1
    assert storage.exec("SELECT * FROM tl_submissions ORDER BY id").rows == before
    assert storage.exec("PRAGMA foreign_key_check").rows == []
    with pytest.raises(StorageError, match="FOREIGN KEY"):
        storage.exec("DELETE FROM tl_submissions WHERE id = 's4'")
    # Queued and ready input may now be held out of the live range; nothing else may.
    storage.exec("UPDATE tl_submissions SET dormant = 1 WHERE state IN ('queued', 'ready')")
    for state in ("running", "terminalizing", "settled"):
        with pytest.raises(StorageError, match="CHECK"):
            storage.exec("UPDATE tl_submissions SET dormant = 1 WHERE state = ?", state)
    with pytest.raises(StorageError, match="CHECK"):
        storage.exec("UPDATE tl_submissions SET dormant = 0 WHERE state = 'suspended'")
    live = storage.exec("SELECT id FROM tl_submissions INDEXED BY tl_submissions_open"
                        " WHERE settled_at IS NULL AND dormant = 0 ORDER BY seq").rows
    assert [row["id"] for row in live] == ["s3", "s7"]


def test_threads_with_a_due_timer_are_read_from_the_open_wait_index_alone(
    storage: SqliteStorage,
) -> None:
    for query in (waits_module._DUE_TIMER_THREADS, waits_module._NEXT_TIMER):
        plan = storage.exec("EXPLAIN QUERY PLAN " + query, 0)
        assert any("COVERING INDEX tl_waits_open" in row["detail"] for row in plan), plan.rows


def test_open_waits_learn_their_thread_and_closed_ones_are_left_as_they_are() -> None:
    step = MIGRATIONS.index(schema_module._WAIT_THREADS)
    storage = SqliteStorage(":memory:")
    migrate(storage, target=step)
    storage.exec("INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
    for seq, state in enumerate(("suspended", "settled"), start=1):
        settled = state == "settled"
        storage.exec(
            "INSERT INTO tl_submissions (id, thread_id, seq, agent, input_json, input_digest,"
            " state, dormant, outcome, created_at, updated_at, settled_at)"
            " VALUES (?, 't', ?, 'echo', '{}', 'd', ?, ?, ?, 1, 1, ?)",
            f"s{seq}", seq, state, int(not settled), "completed" if settled else None,
            2 if settled else None)
    storage.exec("INSERT INTO tl_waits (id, submission_id, kind, wait_key, state, wake_at,"
                 " created_at) VALUES ('open', 's1', 'timer', 'nap', 'open', 50, 5)")
    storage.exec("INSERT INTO tl_waits (id, submission_id, kind, wait_key, state, wake_at,"
                 " created_at, resolved_at) VALUES ('done', 's2', 'timer', 'nap', 'resolved',"
                 " 40, 5, 41)")
    assert migrate(storage, target=step + 1) == 1
    rows = storage.exec("SELECT id, thread_id FROM tl_waits ORDER BY id").rows
    assert rows == [{"id": "done", "thread_id": None}, {"id": "open", "thread_id": "t"}]
    assert waits_module.due_timer_threads(storage, 50) == ["t"]
    assert waits_module.due_timer_threads(storage, 49) == []


def test_parked_subscribers_are_found_through_their_partial_index(storage: SqliteStorage) -> None:
    from threadline.maintenance.subscriber_cursors import _PARKED_ROWS

    plan = storage.exec(f"EXPLAIN QUERY PLAN {_PARKED_ROWS}")
    assert any("tl_subscribers_parked" in row["detail"] for row in plan)


def test_pending_messages_queue_per_target_in_the_order_they_were_written() -> None:
    step = MIGRATIONS.index(schema_module._MESSAGE_TARGETS)
    storage = SqliteStorage(":memory:")
    migrate(storage, target=step)
    for message_id, to_space, state, due, created in (
        ("m3", "b", "pending", 90, 12), ("m1", "b", "pending", 95, 11),
        ("m2", "b", "pending", 5, 12), ("m4", "c", "pending", 60, 13),
        ("m0", "b", "delivered", None, 1),
    ):
        storage.exec(
            "INSERT INTO tl_messages (id, from_thread, from_submission, to_space, to_thread,"
            " input_json, state, next_attempt_at, created_at) VALUES (?, 't', 's', ?, 'x', '{}',"
            " ?, ?, ?)", message_id, to_space, state, due, created)
    assert migrate(storage, target=step + 1) == 1
    rows = storage.exec("SELECT id, seq, hops FROM tl_messages ORDER BY id").rows
    assert [(r["id"], r["seq"], r["hops"]) for r in rows] == [
        ("m0", None, 1), ("m1", 1, 1), ("m2", 2, 1), ("m3", 3, 1), ("m4", 1, 1)]
    targets = storage.exec("SELECT space, due_at, failures FROM tl_message_targets ORDER BY space")
    assert [(r["space"], r["due_at"], r["failures"]) for r in targets] == [
        ("b", 5, 0), ("c", 60, 0)]
