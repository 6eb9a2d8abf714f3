"""Input submitted to a Thread while its head (an agent registered with join_followups=True)
runs is handed to that head by ``turn.followups()``: oldest first, each as its submission id
and input. Those submissions go ``joined`` (dormant, naming the head) and settle with the
head's result, each with its own settlement and its own settled record naming the head."""

from __future__ import annotations

from followups_support import Chat

from threadline.clock import ManualClock
from threadline.storage import SqliteStorage
from threadline.testing import SettlementLog
from threadline.threads.model import Outcome, SubmissionState


def test_followups_returns_the_input_that_arrived_and_joins_it(
    storage: SqliteStorage, clock: ManualClock, settlements: SettlementLog
) -> None:
    chat = Chat(storage, clock)
    head = chat.admit("hi")
    chat.arriving = [("chat", "also: in French"), ("chat", "and short")]
    states: list[tuple[str, bool, str | None]] = []

    async def look(_turn: object) -> None:
        for sub_id in chat.arrived:
            row = storage.exec("SELECT state, dormant, joined_to FROM tl_submissions"
                               " WHERE id = ?", sub_id).one()
            states.append((row["state"], bool(row["dormant"]), row["joined_to"]))

    chat._extra = look
    settlement = chat.run_head()

    first, second = chat.arrived
    assert chat.seen == [[(first, "also: in French"), (second, "and short")]]
    # While the head ran on, they were joined to it: dormant, naming it.
    assert states == [("joined", True, head.id), ("joined", True, head.id)]
    result = {"input": "hi", "followups": ["also: in French", "and short"]}
    assert settlement is not None and settlement.result == result
    for sub_id in (head.id, first, second):
        done = chat.h.get(sub_id)
        assert (done.state, done.outcome, done.result) == (
            SubmissionState.SETTLED, Outcome.COMPLETED, result)
        assert settlements.count(sub_id) == chat.h.settled_records(sub_id) == 1
    # Each joined submission keeps the head it joined; its settled record names it.
    assert chat.h.get(first).joined_to == chat.h.get(second).joined_to == head.id
    assert chat.h.get(head.id).joined_to is None
    assert chat.settled_body(first)["joined_to"] == head.id
    assert "joined_to" not in chat.settled_body(head.id)
    # Nothing is left to run: the joined input did not run again on its own.
    assert chat.h.ledger.thread_open("t") == []
    assert chat.answers == 1


def test_followups_is_empty_when_nothing_arrived(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    chat = Chat(storage, clock)
    head = chat.admit("hi")
    chat.run_head()
    assert chat.seen == [[]]
    assert chat.h.get(head.id).result == {"input": "hi", "followups": []}
