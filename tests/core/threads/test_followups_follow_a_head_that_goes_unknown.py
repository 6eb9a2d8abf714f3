"""Joined input follows its head through an Unknown Outcome: it stays joined (dormant) while
later input runs past the head, and settles with the head once an operator resolves it."""

from __future__ import annotations

import asyncio

import pytest
from followups_support import Chat

from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.storage import SqliteStorage
from threadline.testing import SettlementLog
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn


def test_joined_input_waits_for_the_unknown_head_and_settles_with_it(
    storage: SqliteStorage, clock: ManualClock, settlements: SettlementLog
) -> None:
    lost: list[bool] = []

    def deliver() -> str:
        if not lost:
            lost.append(True)
            raise Evicted("lost while sending")
        return "sent"

    async def send(turn: Turn) -> None:
        await turn.step("send", deliver, effect="uncertain")

    chat = Chat(storage, clock, extra=send)
    head = chat.admit("hi")
    chat.arriving = [("chat", "more"), ("other", "ping")]
    with pytest.raises(Evicted):
        chat.run_head()
    more, ping = chat.arrived
    chat.h.evict()
    clock.advance(chat.config.lease_ms)
    asyncio.run(chat.h.drive())
    assert chat.h.get(head.id).state is SubmissionState.UNKNOWN
    # Later input ran past the Unknown Outcome; the joined input did not.
    assert chat.h.get(ping).outcome is Outcome.COMPLETED
    joined = chat.h.get(more)
    assert (joined.state, joined.joined_to) == (SubmissionState.JOINED, head.id)

    chat.h.ledger.resolve_unknown(head.id, "accept", "operator says sent")
    asyncio.run(chat.h.drive())
    done = chat.h.get(head.id)
    assert done.outcome is Outcome.COMPLETED and done.result["followups"] == ["more"]
    assert chat.h.get(more).result == done.result
    # The replay after the resolution saw the list the lost Attempt took.
    assert chat.seen == [[(more, "more")], [(more, "more")]]
    assert settlements.count(head.id) == settlements.count(more) == 1
