"""Input that carries a due time (``not_before``) already reached when it arrives sits in the
Thread's FIFO like any other, so the head takes it as a follow-up: a due time at the very
moment of ``followups()`` is reached, not still ahead."""

from __future__ import annotations

from followups_support import Chat

from threadline.clock import ManualClock
from threadline.storage import SqliteStorage


def test_followups_join_input_whose_due_time_is_now_or_past(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    chat = Chat(storage, clock)
    chat.admit("hi")

    def answer() -> str:
        now = clock.now_ms()
        for value, due in (("due before", now - 5_000), ("due now", now)):
            admitted = chat.h.ledger.admit("t", "chat", value, None, not_before=due)
            chat.arrived.append(admitted.submission.id)
        return "answered"

    chat._answer = answer  # type: ignore[method-assign]
    settlement = chat.run_head()

    first, second = chat.arrived
    assert chat.seen == [[(first, "due before"), (second, "due now")]]
    assert settlement is not None
    assert settlement.result == {"input": "hi", "followups": ["due before", "due now"]}
