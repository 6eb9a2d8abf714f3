"""An idempotency key names one submission per Thread, scheduled or admitted: the same key with
the same input answers with it (admitting nothing), with other input it is a conflict."""

from __future__ import annotations

import asyncio

import pytest
from delayed_support import MINUTE, START, Ran, admitted, pending, simulated

from threadline.errors import Conflict
from threadline.threads.model import ScheduledSubmission


async def _run() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        due = START + MINUTE
        first = obj.ledger.admit("t", "echo", "x", "k", not_before=due)
        assert first.created and isinstance(first.submission, ScheduledSubmission)
        again = obj.ledger.admit("t", "echo", "x", "k", not_before=due + MINUTE)
        assert not again.created and again.submission == first.submission
        # The same key, admitted at once: the same (still scheduled) submission.
        now = obj.ledger.admit("t", "echo", "x", "k")
        assert not now.created and now.submission == first.submission
        with pytest.raises(Conflict) as conflict:
            obj.ledger.admit("t", "echo", "other", "k", not_before=due)
        assert conflict.value.field == "idempotency_key"
        with pytest.raises(Conflict):
            obj.ledger.admit("t", "echo", "other", "k")
        assert pending(obj) == 1 and obj.submissions() == []
        # Another Thread's key space is its own.
        elsewhere = obj.ledger.admit("u", "echo", "other", "k", not_before=due)
        assert elsewhere.created
        await obj.run_alarms()
        assert sorted(ran.inputs()) == ["other", "x"]
        # Once admitted, the key still answers with it, delayed or not.
        replay = obj.ledger.admit("t", "echo", "x", "k", not_before=due + 2 * MINUTE)
        assert not replay.created and replay.submission == admitted(obj, first.submission.id)
        with pytest.raises(Conflict):
            obj.ledger.admit("t", "echo", "other", "k", not_before=due + 2 * MINUTE)
        assert pending(obj) == 0 and len(obj.submissions("t")) == 1


def test_a_key_names_one_submission_whether_scheduled_or_admitted() -> None:
    asyncio.run(_run())
