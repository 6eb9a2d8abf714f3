"""Each ``followups()`` call is journaled with the ids it joined, in the transaction that
joins them: an Attempt that runs the agent again (a retry after a failure) gets the same list
back from the journal, the empty one included, even when more input arrived meanwhile; that
input is left for a later call or runs after the head."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from followups_support import Chat

from threadline.clock import ManualClock
from threadline.storage import SqliteStorage
from threadline.testing import SettlementLog
from threadline.threads.model import Outcome
from threadline.threads.turn import Turn

_JOURNAL = "SELECT step_key, value_json FROM tl_journal WHERE submission_id = ? ORDER BY position"


def _fail_once(chat_ref: list[Chat], arrive: str) -> Callable[[Turn], Awaitable[None]]:
    """The first Attempt of the first submission fails, input arriving as it does."""
    failed: list[bool] = []

    async def fail_once(turn: Turn) -> None:
        if not failed:
            failed.append(True)
            chat_ref[0].admit(arrive)
            raise RuntimeError("the model timed out")
    return fail_once


def test_a_retry_sees_the_list_the_failed_attempt_took(
    storage: SqliteStorage, clock: ManualClock, settlements: SettlementLog
) -> None:
    ref: list[Chat] = []
    chat = Chat(storage, clock, extra=_fail_once(ref, arrive="while failing"))
    ref.append(chat)
    head = chat.admit("hi")
    chat.arriving = [("chat", "more")]
    chat.run_head()  # took "more", then failed: ready again after a backoff
    more = chat.arrived[0]
    assert chat.h.get(head.id).attempts == 1 and chat.h.get(more).joined_to == head.id
    clock.advance(3_600_000)
    chat.run_head()
    # The retry replayed the journaled list: the same one, not the input that arrived since.
    assert chat.seen == [[(more, "more")], [(more, "more")]]
    assert chat.answers == 1  # the answer step replayed from the journal too
    entries = storage.exec(_JOURNAL, head.id).rows
    assert [row["step_key"] for row in entries] == ["step:answer", "followups"]
    assert json.loads(entries[1]["value_json"]) == {"ids": [more]}
    done = chat.h.get(head.id)
    assert done.outcome is Outcome.COMPLETED and done.result["followups"] == ["more"]
    assert chat.h.get(more).result == done.result
    assert settlements.count(head.id) == settlements.count(more) == 1
    # What arrived while the first Attempt failed runs after the head.
    chat.drive()
    later = storage.exec("SELECT input_json, joined_to, outcome FROM tl_submissions"
                         " ORDER BY seq DESC LIMIT 1").one()
    assert (later["input_json"], later["joined_to"], later["outcome"]) == (
        '"while failing"', None, "completed")


def test_an_empty_list_is_journaled_and_replayed_empty(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    ref: list[Chat] = []
    chat = Chat(storage, clock, extra=_fail_once(ref, arrive="while failing"))
    ref.append(chat)
    head = chat.admit("hi")
    chat.run_head()
    clock.advance(3_600_000)
    chat.run_head()
    assert chat.seen == [[], []]
    assert chat.h.get(head.id).result == {"input": "hi", "followups": []}


def test_a_second_call_takes_only_what_arrived_since_the_first(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    second: list[list[str]] = []

    async def call_again(turn: Turn) -> None:
        chat.admit("meanwhile")
        second.append([item.input for item in await turn.followups()])

    chat = Chat(storage, clock, extra=call_again)
    chat.admit("hi")
    chat.arriving = [("chat", "more")]
    chat.run_head()
    assert [[value for _, value in seen] for seen in chat.seen] == [["more"]]
    assert second == [["meanwhile"]]
