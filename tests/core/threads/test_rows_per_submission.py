"""The rows the submission path writes, pinned statement by statement.

Workerd bills every row written, index entries included. The sqlite3 meter counts changed rows
only, so the index cost of a statement is pinned here from the statement's own program: the
b-trees it opens for writing and the instructions that insert into them.
"""

from __future__ import annotations

from threadline.storage import SqliteStorage
from threadline.threads import outbox, views

_THREAD = "INSERT INTO tl_threads (id, created_at, updated_at) VALUES (?, ?, ?)"


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
