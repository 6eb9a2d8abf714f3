"""Joined input settles with its head, whatever the head's outcome: failed with the head's
error, aborted with the head's abort (observed by the running Attempt, or applied while the
head waits between Attempts), each in the head's settlement transaction."""

from __future__ import annotations

import asyncio

from followups_support import Chat

from threadline.clock import ManualClock
from threadline.errors import NonRetryable
from threadline.storage import SqliteStorage
from threadline.testing import SettlementLog
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn


def test_joined_input_fails_with_the_heads_error(
    storage: SqliteStorage, clock: ManualClock, settlements: SettlementLog
) -> None:
    async def refuse(turn: Turn) -> None:
        raise NonRetryable("the model refused")

    chat = Chat(storage, clock, extra=refuse)
    head = chat.admit("hi")
    chat.arriving = [("chat", "more")]
    chat.run_head()
    failed, joined = chat.h.get(head.id), chat.h.get(chat.arrived[0])
    assert failed.outcome is Outcome.FAILED and failed.error["message"] == "the model refused"
    assert (joined.outcome, joined.error, joined.settled_at) == (
        Outcome.FAILED, failed.error, failed.settled_at)
    assert settlements.count(joined.id) == chat.h.settled_records(joined.id) == 1
    assert chat.settled_body(joined.id)["error"] == failed.error


def test_joined_input_is_aborted_with_a_running_head(
    storage: SqliteStorage, clock: ManualClock, settlements: SettlementLog
) -> None:
    async def aborted_meanwhile(turn: Turn) -> None:
        chat.h.ledger.request_abort(turn.submission_id, "user left")
        await turn.step("after", lambda: "never")

    chat = Chat(storage, clock, extra=aborted_meanwhile)
    head = chat.admit("hi")
    chat.arriving = [("chat", "more")]
    chat.run_head()
    for sub_id in (head.id, chat.arrived[0]):
        done = chat.h.get(sub_id)
        assert done.outcome is Outcome.ABORTED
        assert done.error == {"type": "Aborted", "message": "user left"}
        assert settlements.count(sub_id) == 1


def test_joined_input_is_aborted_with_a_head_waiting_for_its_retry(
    storage: SqliteStorage, clock: ManualClock, settlements: SettlementLog
) -> None:
    async def fail(turn: Turn) -> None:
        raise RuntimeError("transient")

    chat = Chat(storage, clock, extra=fail)
    head = chat.admit("hi")
    chat.arriving = [("chat", "more")]
    chat.run_head()
    assert chat.h.get(head.id).state is SubmissionState.READY
    assert chat.h.get(chat.arrived[0]).state is SubmissionState.JOINED
    chat.h.ledger.request_abort(head.id)
    joined = chat.h.get(chat.arrived[0])
    assert joined.outcome is Outcome.ABORTED and settlements.count(joined.id) == 1
    assert asyncio.run(chat.h.drive()) == []
