"""The ``tl_messages`` rows of a sending space: written once, selected for delivery when due
(earliest first, up to a batch), and what a delivered or failed message keeps."""

from __future__ import annotations

import pytest

from threadline.storage import SqliteStorage, migrate
from threadline.threads import message_rows as rows


@pytest.fixture
def storage() -> SqliteStorage:
    storage = SqliteStorage(":memory:")
    migrate(storage)
    return storage


def _enqueue(storage: SqliteStorage, message_id: str, due: int) -> bool:
    return rows.enqueue_message(
        storage, message_id=message_id, from_thread="t", from_submission="sub_1",
        to_space="b", to_thread="inbox", input_json="{}", now=due)


def _ids(messages: list[rows.Message]) -> list[str]:
    return [message.id for message in messages]


def test_a_message_is_written_once_and_then_exists(storage: SqliteStorage) -> None:
    assert not rows.message_exists(storage, "sub_1:send")
    assert _enqueue(storage, "sub_1:send", 10) is True
    assert _enqueue(storage, "sub_1:send", 20) is False
    assert rows.message_exists(storage, "sub_1:send")
    assert not rows.message_exists(storage, "sub_1:send#2")


def test_every_message_due_up_to_the_batch_is_taken_earliest_first(storage: SqliteStorage) -> None:
    for message_id, due in (("c", 30), ("later", 100), ("a", 10), ("b", 20)):
        _enqueue(storage, message_id, due)
    due, next_due = rows.due_then_next(storage, 30, 5)
    assert (_ids(due), next_due) == (["a", "b", "c"], 100)
    assert _ids(rows.due_then_next(storage, 30, 2)[0]) == ["a", "b"]


def test_messages_due_exactly_now_are_all_taken_and_next_is_strictly_later(
    storage: SqliteStorage,
) -> None:
    for message_id in ("a", "b", "c"):
        _enqueue(storage, message_id, 50)
    _enqueue(storage, "later", 60)
    due, next_due = rows.due_then_next(storage, 50, 5)
    assert (sorted(_ids(due)), next_due) == (["a", "b", "c"], 60)


def test_one_due_message_and_one_later_give_that_one_and_the_later_time(
    storage: SqliteStorage,
) -> None:
    _enqueue(storage, "now", 50)
    _enqueue(storage, "later", 60)
    due, next_due = rows.due_then_next(storage, 50, 5)
    assert (_ids(due), next_due) == (["now"], 60)
    assert rows.due_then_next(storage, 49, 5) == ([], 50)


def test_next_due_is_when_the_earliest_pending_message_is_due(storage: SqliteStorage) -> None:
    assert rows.next_due(storage) is None
    _enqueue(storage, "b", 20)
    _enqueue(storage, "a", 10)
    assert rows.next_due(storage) == 10
    assert rows.mark_delivered(storage, "a", "sub_x", 15)
    assert rows.next_due(storage) == 20


def test_a_delivered_message_keeps_the_submission_it_became_and_when(
    storage: SqliteStorage,
) -> None:
    _enqueue(storage, "sub_1:send", 10)
    assert rows.mark_delivered(storage, "sub_1:send", "sub_made", 77)
    assert not rows.mark_delivered(storage, "sub_1:send", "sub_other", 88)
    [message] = rows.of_submission(storage, "sub_1")
    assert (message.state, message.admitted_as, message.delivered_at, message.next_attempt_at) \
        == ("delivered", "sub_made", 77, None)


def test_a_failure_reason_of_the_limit_is_kept_whole_and_a_longer_one_is_cut(
    storage: SqliteStorage,
) -> None:
    whole, long = "x" * rows.MAX_REASON_CHARS, "y" * (rows.MAX_REASON_CHARS + 1)
    _enqueue(storage, "sub_1:send", 10)
    _enqueue(storage, "sub_1:send#2", 10)
    assert rows.mark_failed(storage, "sub_1:send", whole, 20)
    rows.note_failure(storage, "sub_1:send#2", long, 30)
    kept = {m.id: m.last_error for m in rows.of_submission(storage, "sub_1")}
    assert kept["sub_1:send"] == whole
    assert kept["sub_1:send#2"] == "y" * rows.MAX_REASON_CHARS + "... (1001 characters)"
