"""The ``tl_messages`` rows of a sending space: written once, queued per target space in the
order they were sent, each target due when its oldest message goes next (earliest first, up to
a batch), and what a delivered or failed message keeps."""

from __future__ import annotations

import pytest

from threadline.storage import SqliteStorage, migrate
from threadline.threads import message_rows as rows


@pytest.fixture
def storage() -> SqliteStorage:
    storage = SqliteStorage(":memory:")
    migrate(storage)
    return storage


def _enqueue(storage: SqliteStorage, message_id: str, due: int, to_space: str = "b") -> bool:
    return rows.enqueue_message(
        storage, message_id=message_id, from_thread="t", from_submission="sub_1",
        to_space=to_space, to_thread="inbox", input_json="{}", now=due)


def _ids(messages: list[rows.Message]) -> list[str]:
    return [message.id for message in messages]


def _spaces(targets: list[rows.Target]) -> list[str]:
    return [target.space for target in targets]


def test_a_message_is_written_once_and_then_exists(storage: SqliteStorage) -> None:
    assert not rows.message_exists(storage, "sub_1:send")
    assert _enqueue(storage, "sub_1:send", 10) is True
    assert _enqueue(storage, "sub_1:send", 20) is False
    assert rows.message_exists(storage, "sub_1:send")
    assert not rows.message_exists(storage, "sub_1:send#2")


def test_every_target_due_up_to_the_batch_is_taken_earliest_first(storage: SqliteStorage) -> None:
    for space, due in (("c", 30), ("later", 100), ("a", 10), ("b", 20)):
        _enqueue(storage, f"sub_1:{space}", due, to_space=space)
    due, next_due = rows.due_targets(storage, 30, 5)
    assert (_spaces(due), next_due) == (["a", "b", "c"], 100)
    assert _spaces(rows.due_targets(storage, 30, 2)[0]) == ["a", "b"]
    assert rows.due_targets(storage, 9, 5) == ([], 10)


def test_a_target_is_due_when_its_first_message_was_sent_and_serves_them_in_order(
    storage: SqliteStorage,
) -> None:
    # Ids that sort against the order they were sent: the queue keeps the sending order.
    for message_id, at in (("sub_1:send#3", 50), ("sub_1:send#10", 55), ("sub_1:send", 60)):
        _enqueue(storage, message_id, at)
    (target,) = rows.due_targets(storage, 100, 5)[0]
    assert (target.space, target.due_at, target.failures) == ("b", 50, 0)
    served = []
    while (head := rows.head(storage, "b")) is not None:
        served.append(head.id)
        assert rows.mark_delivered(storage, head.id, "sub_x", 70)
    assert served == ["sub_1:send#3", "sub_1:send#10", "sub_1:send"]
    assert rows.target(storage, "b") is None


def test_a_target_backing_off_keeps_its_time_for_new_messages_and_resets_once_served(
    storage: SqliteStorage,
) -> None:
    _enqueue(storage, "first", 10)
    head = rows.head(storage, "b")
    assert head is not None
    rows.note_failure(storage, head, "TimedOut", 500)
    _enqueue(storage, "second", 20)
    target = rows.target(storage, "b")
    assert target is not None
    assert (target.due_at, target.failures, target.last_error) == (500, 1, "TimedOut")
    assert rows.due_targets(storage, 499, 5) == ([], 500)
    assert rows.mark_delivered(storage, "first", "sub_x", 510)
    target = rows.target(storage, "b")
    assert target is not None
    assert (target.due_at, target.failures, target.last_error) == (510, 0, None)
    assert rows.mark_failed(storage, "second", "Refused", 520)
    assert rows.target(storage, "b") is None


def test_next_due_is_when_the_earliest_target_is_due(storage: SqliteStorage) -> None:
    assert rows.next_due(storage) is None
    _enqueue(storage, "b", 20, to_space="b")
    _enqueue(storage, "a", 10, to_space="a")
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
    second = rows.head(storage, "b")
    assert second is not None and second.id == "sub_1:send#2"
    rows.note_failure(storage, second, long, 30)
    kept = {m.id: m.last_error for m in rows.of_submission(storage, "sub_1")}
    assert kept["sub_1:send"] == whole
    assert kept["sub_1:send#2"] == "y" * rows.MAX_REASON_CHARS + "... (1001 characters)"
