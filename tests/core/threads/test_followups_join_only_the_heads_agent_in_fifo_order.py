"""Only the queued input right behind the head, for the head's own agent, is joined: the first
submission for another agent ends the run, and it and everything behind it (even for the
head's agent) stay FIFO and run after the head, in order."""

from __future__ import annotations

from followups_support import Chat

from threadline.clock import ManualClock
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState


def test_another_agents_input_stops_the_join_and_keeps_fifo(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    chat = Chat(storage, clock)
    head = chat.admit("hi")
    chat.arriving = [("chat", "more"), ("other", "ping"), ("chat", "after the ping")]
    chat.run_head()
    more, ping, after = chat.arrived
    assert chat.seen == [[(more, "more")]]
    assert chat.h.get(more).joined_to == head.id
    assert [(item.submission_id, item.state) for item in chat.h.ledger.thread_open("t")] == [
        (ping, SubmissionState.QUEUED), (after, SubmissionState.QUEUED)]

    chat.drive()
    done = [chat.h.get(sub_id) for sub_id in (ping, after)]
    assert [d.outcome for d in done] == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert done[0].result == {"other": "ping"}
    assert done[1].joined_to is None
    assert done[1].result == {"input": "after the ping", "followups": []}
    # FIFO: the ping settled before the later chat input ran.
    assert done[0].settled_at is not None and done[1].settled_at is not None
    order = storage.exec("SELECT record_id FROM tl_history WHERE kind = 'submission.settled'"
                         " ORDER BY pos").rows
    assert [row["record_id"] for row in order] == [
        f"{head.id}:settled", f"{more}:settled", f"{ping}:settled", f"{after}:settled"]


def test_input_that_already_ran_is_not_joined(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    chat = Chat(storage, clock)
    head = chat.admit("hi")
    behind = chat.admit("later")
    # As if it had run before and been readied again: it is its own work, not new input.
    storage.exec("UPDATE tl_submissions SET state = 'ready', attempts = 1 WHERE id = ?",
                 behind.id)
    chat.run_head()
    assert chat.seen == [[]]
    assert chat.h.get(head.id).outcome is Outcome.COMPLETED
    assert chat.h.get(behind.id).state is SubmissionState.READY
