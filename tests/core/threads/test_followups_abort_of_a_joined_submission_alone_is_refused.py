"""A joined submission's input was already taken by its head, so it cannot be withdrawn on
its own: aborting it alone is refused with a Conflict (409) naming the head, and changes
nothing; once it settled with its head, an abort returns it unchanged."""

from __future__ import annotations

import pytest
from followups_support import Chat

from threadline.clock import ManualClock
from threadline.errors import Conflict
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn


def test_aborting_a_joined_submission_alone_is_refused(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    refusals: list[Conflict] = []

    async def try_abort(turn: Turn) -> None:
        with pytest.raises(Conflict) as raised:
            chat.h.ledger.request_abort(chat.arrived[0], "never mind")
        refusals.append(raised.value)
        assert chat.h.get(chat.arrived[0]).state is SubmissionState.JOINED
        assert chat.h.ledger.read_abort_intent(chat.arrived[0]) is None

    chat = Chat(storage, clock, extra=try_abort)
    head = chat.admit("hi")
    chat.arriving = [("chat", "more")]
    chat.run_head()
    assert len(refusals) == 1 and refusals[0].status == 409 and head.id in refusals[0].message
    joined = chat.h.get(chat.arrived[0])
    assert joined.outcome is Outcome.COMPLETED
    # Settled with its head: an abort now changes nothing, as for any settled submission.
    assert chat.h.ledger.request_abort(joined.id) == joined
