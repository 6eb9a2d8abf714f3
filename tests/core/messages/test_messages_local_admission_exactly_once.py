"""A message into the sender's own space is admitted in one transaction with its marking as
delivered: it becomes exactly one submission of its target Thread, even when the object is
lost between the admission and the marking (both roll back, and the redelivery admits it)."""

from __future__ import annotations

import asyncio
import sqlite3

from messages_support import START, build_app, forward, sent

from threadline import ManualClock
from threadline.maintenance.message_lane import ADMITTING
from threadline.testing import SimulatedObject
from threadline.threads.message_rows import inbound_key
from threadline.threads.model import Outcome, SubmissionState


def test_a_message_into_the_same_space_is_admitted_and_settled_there() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="acme",
                                   check_alarm_invariant=True) as obj:
            sub = obj.admit("sender", "forward", forward("acme", "inbox"))
            await obj.run_alarms()
            assert obj.submission(sub.id).outcome is Outcome.COMPLETED
            (message,) = sent(obj, sub.id)
            (target,) = obj.submissions("inbox")
            assert message.state == "delivered" and message.admitted_as == target.id
            assert target.idempotency_key == inbound_key(message.id)
            assert target.agent == "echo" and target.input == {"text": "hi"}
            assert target.outcome is Outcome.COMPLETED
            assert target.result == {"got": {"text": "hi"}}
            # Local delivery never goes through a router: no attempt was charged.
            assert message.attempts == 0

    asyncio.run(go())


def test_local_admission_is_exactly_once_across_a_crash_between_admit_and_mark() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="acme",
                                   check_alarm_invariant=True) as obj:
            crash = obj.crash_at(ADMITTING)
            # What the file held when the object was lost: the admission and the marking are
            # one transaction, so neither is there.
            at_loss: list[tuple[int, str]] = []
            restart = obj.evict

            async def evict() -> None:
                conn = sqlite3.connect(obj.path)
                try:
                    admitted = conn.execute(
                        "SELECT COUNT(*) FROM tl_submissions WHERE thread_id = 'inbox'"
                    ).fetchone()[0]
                    state = conn.execute("SELECT state FROM tl_messages").fetchone()[0]
                finally:
                    conn.close()
                at_loss.append((admitted, state))
                await restart()

            obj.evict = evict  # type: ignore[method-assign]
            sub = obj.admit("sender", "forward", forward("acme", "inbox"))
            await obj.run_alarms()
            assert crash.fired and obj.evictions == 1
            assert at_loss == [(0, "pending")]
            assert obj.hits(ADMITTING) == 2  # lost once, admitted on the redelivery
            (message,) = sent(obj, sub.id)
            targets = obj.submissions("inbox")
            assert [t.id for t in targets] == [message.admitted_as]
            assert targets[0].state is SubmissionState.SETTLED
            assert message.state == "delivered"

    asyncio.run(go())


def test_a_local_message_redelivered_after_its_admission_finds_its_submission() -> None:
    # The target's idempotency key derives from the message id: a second delivery of the same
    # message (here by hand, as a router retrying would) answers with the first submission.
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="acme") as obj:
            sub = obj.admit("sender", "forward", forward("acme", "inbox"))
            await obj.run_alarms()
            (message,) = sent(obj, sub.id)
            again = obj.space.admit_message(message.id, "inbox", "echo", message.input_json)
            assert getattr(again, "submission_id", None) == message.admitted_as
            assert len(obj.submissions("inbox")) == 1

    asyncio.run(go())
