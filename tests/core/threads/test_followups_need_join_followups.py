"""``turn.followups()`` is for agents registered with ``join_followups=True``: any other
agent calling it fails for good (ValidationFailed) and joins nothing; registering the flag
takes only True or False."""

from __future__ import annotations

import pytest
from followups_support import Chat

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState


def test_an_agent_without_join_followups_cannot_take_followups(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    chat = Chat(storage, clock)
    head = chat.admit("hi", agent="plain")
    behind = chat.admit("more", agent="plain")
    chat.run_head()
    failed = chat.h.get(head.id)
    assert failed.outcome is Outcome.FAILED and failed.attempts == 1
    assert failed.error["type"] == "ValidationFailed"
    assert "join_followups" in failed.error["message"]
    assert chat.h.get(behind.id).state is SubmissionState.QUEUED


def test_join_followups_takes_a_bool() -> None:
    app = Application()

    @app.agent("chat", join_followups=True)
    async def chat(turn: object) -> None:
        return None

    assert app.agents.resolve("chat").join_followups is True
    with pytest.raises(TypeError, match="join_followups must be True or False"):
        @app.agent("other", join_followups="yes")  # type: ignore[arg-type]
        async def other(turn: object) -> None:
            return None
