"""A message into another space goes through the router to that space's object, which admits
it idempotently by message id: a redelivery (the sender lost after the target accepted, before
it recorded the answer) finds the submission the first delivery made."""

from __future__ import annotations

import asyncio

from messages_support import deployment, forward, sent

from threadline.maintenance.message_lane import ANSWERED
from threadline.threads.model import Outcome
from threadline.threads.routing import Accepted


def test_a_message_into_another_space_is_admitted_and_settled_there() -> None:
    async def go() -> None:
        async with deployment() as world:
            sub = world.space("a").admit("sender", "forward", forward("b", "inbox"))
            await world.run_alarms()
            a, b = world.space("a"), world.space("b")
            assert a.submission(sub.id).outcome is Outcome.COMPLETED
            (message,) = sent(a, sub.id)
            (target,) = b.submissions("inbox")
            assert message.state == "delivered" and message.admitted_as == target.id
            assert message.attempts == 1
            assert target.outcome is Outcome.COMPLETED
            assert target.result == {"got": {"text": "hi"}}
            # Nothing of it was admitted in the sender's own space.
            assert a.submissions("inbox") == []

    asyncio.run(go())


def test_cross_space_admission_is_exactly_once_with_a_redelivery() -> None:
    async def go() -> None:
        async with deployment() as world:
            crash = world.crash_at("a", ANSWERED)
            sub = world.space("a").admit("sender", "forward", forward("b", "inbox"))
            await world.run_alarms()
            a, b = world.space("a"), world.space("b")
            assert crash.fired and a.evictions == 1
            (message,) = sent(a, sub.id)
            verdicts = [d.verdict for d in world.deliveries if d.message_id == message.id]
            # Delivered twice, accepted twice, as the same submission.
            assert len(verdicts) == 2
            assert all(isinstance(v, Accepted) for v in verdicts)
            assert {v.submission_id for v in verdicts if isinstance(v, Accepted)} == {
                message.admitted_as}
            (target,) = b.submissions("inbox")
            assert target.id == message.admitted_as and target.outcome is Outcome.COMPLETED
            assert message.state == "delivered" and message.attempts == 2

    asyncio.run(go())


def test_a_target_lost_while_admitting_admits_the_message_once_on_the_retry() -> None:
    async def go() -> None:
        async with deployment() as world:
            b = world.space("b")
            await b.start()
            # The target's gate commits the admission, then the object is lost before the
            # answer leaves it: the sender sees a failed call and delivers again.
            crash = world.crash_at("b", "maintenance:dirty:after")
            sub = world.space("a").admit("sender", "forward", forward("b", "inbox"))
            await world.run_alarms()
            assert crash.fired
            (message,) = sent(world.space("a"), sub.id)
            assert [d.verdict is None for d in world.deliveries] == [True, False]
            (target,) = world.space("b").submissions("inbox")
            assert target.id == message.admitted_as and target.outcome is Outcome.COMPLETED

    asyncio.run(go())


def test_several_messages_of_one_submission_are_each_admitted_once() -> None:
    async def go() -> None:
        async with deployment() as world:
            sub = world.space("a").admit("sender", "fanout", {"space": "b"})
            await world.run_alarms()
            messages = sent(world.space("a"), sub.id)
            assert [m.id for m in messages] == [f"{sub.id}:send", f"{sub.id}:send#2"]
            assert all(m.state == "delivered" for m in messages)
            b = world.space("b")
            assert [s.input for s in b.submissions("inbox-1")] == [{"n": 1}]
            assert [s.input for s in b.submissions("inbox-2")] == [{"n": 2}]

    asyncio.run(go())
