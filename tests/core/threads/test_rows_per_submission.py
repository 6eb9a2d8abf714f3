"""The rows the submission path writes, pinned statement by statement.

Workerd bills every row written, index entries included. The sqlite3 meter counts changed rows
only, so the index cost of a statement is pinned here from the statement's own program: the
b-trees it opens for writing and the instructions that insert into them.
"""

from __future__ import annotations

from threadline.storage import SqliteStorage
from threadline.threads import ledger, outbox, transitions, views

_THREAD = "INSERT INTO tl_threads (id, created_at, updated_at) VALUES (?, ?, ?)"


def btrees_written(storage: SqliteStorage, sql: str) -> list[str]:
    """The tables and indexes ``sql``'s program may insert an entry into, one per instruction.

    An index whose WHERE the statement's columns cannot change is not even opened; a partial
    index the statement may enter is listed even when the row at hand stays out of it.
    """
    roots = {row["rootpage"]: row["name"] for row in storage.exec(
        "SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0")}
    program = storage.exec("EXPLAIN " + sql, *([None] * sql.count("?"))).rows
    cursors = {op["p1"]: roots[op["p2"]] for op in program
               if op["opcode"] == "OpenWrite" and op["p2"] in roots}
    return sorted(cursors[op["p1"]] for op in program
                  if op["opcode"] in ("Insert", "IdxInsert") and op["p1"] in cursors)


def test_claims_and_moves_leave_the_open_work_index_alone(storage: SqliteStorage) -> None:
    # Only settling a submission takes it out of open work: no other transition may rewrite
    # the index's entry (workerd bills that rewrite as one more row).
    for sql in (transitions._CLAIM, transitions._MOVE):
        assert "tl_submissions_open" not in btrees_written(storage, sql), sql
    assert "tl_submissions_open" in btrees_written(storage, transitions._SETTLE)


def test_open_work_is_read_through_its_index(storage: SqliteStorage) -> None:
    # The predicate the reads name must be the index's own, or they scan settled history.
    for sql in (ledger._SCAN_OPEN, ledger._THREAD_OPEN, views._OPEN_PAGE, views._THREAD):
        plan = storage.exec("EXPLAIN QUERY PLAN " + sql, *([None] * sql.count("?"))).rows
        assert any("tl_submissions_open" in row["detail"] for row in plan), sql


def _append(storage: SqliteStorage, thread_id: str, n: int, now: int) -> int:
    return outbox.append_history(
        storage, record_id=f"{thread_id}:r{n}", thread_id=thread_id, submission_id=None,
        kind="record", body_json="{}", now=now,
    )


def test_appending_a_record_writes_the_record_and_its_outbox_row_only(
    storage: SqliteStorage,
) -> None:
    storage.exec(_THREAD, "a", 10, 10)
    storage.exec(_THREAD, "b", 10, 10)
    before = storage.meter.reading()
    assert _append(storage, "a", 1, 20) == 1
    cost = storage.meter.reading() - before
    # No counter row of the Thread is rewritten: the next seq is read from the history's key.
    assert cost.rows_written == 2
    assert [_append(storage, "a", 2, 30), _append(storage, "b", 1, 40),
            _append(storage, "a", 3, 50)] == [2, 1, 3]
    a, b = views.thread(storage, "a"), views.thread(storage, "b")
    assert a is not None and b is not None
    assert (a.history_seq, a.updated_at, a.created_at) == (3, 50, 10)
    assert (b.history_seq, b.updated_at) == (1, 40)
    storage.exec(_THREAD, "c", 60, 60)
    c = views.thread(storage, "c")
    assert c is not None and (c.history_seq, c.updated_at) == (0, 60)
    assert [t.history_seq for t in views.threads_page(storage, after=None, limit=10)] == [3, 1, 0]
