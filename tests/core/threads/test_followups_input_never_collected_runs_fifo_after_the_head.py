"""Input that arrives after the head's last ``followups()`` call is not joined: it stays
queued and runs FIFO after the head, as any input does."""

from __future__ import annotations

from followups_support import Chat

from threadline.clock import ManualClock
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn


def test_input_arriving_after_the_last_call_runs_after_the_head(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    late: list[str] = []

    async def after_the_call(turn: Turn) -> None:
        if not late:
            late.append(chat.admit("too late").id)

    chat = Chat(storage, clock, extra=after_the_call)
    head = chat.admit("hi")
    chat.run_head()
    assert chat.seen == [[]]
    assert chat.h.get(head.id).result == {"input": "hi", "followups": []}
    queued = chat.h.get(late[0])
    assert (queued.state, queued.joined_to) == (SubmissionState.QUEUED, None)

    chat.run_head()
    ran = chat.h.get(late[0])
    assert (ran.outcome, ran.joined_to) == (Outcome.COMPLETED, None)
    assert ran.result == {"input": "too late", "followups": []}
    assert chat.answers == 2
