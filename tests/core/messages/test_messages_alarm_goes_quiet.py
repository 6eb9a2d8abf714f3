"""One ``send`` no longer keeps the object's alarm armed for good: the messages lane is due
only while a message is pending, and once the last one is delivered (or failed for good) the
lane is idle and the alarm slot empties."""

from __future__ import annotations

import asyncio

from messages_support import START, build_app, deployment, forward, sent

from threadline import ManualClock
from threadline.scheduling import MESSAGES
from threadline.testing import SimulatedObject


def test_the_alarm_goes_quiet_after_a_message_is_delivered() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="acme",
                                   check_alarm_invariant=True) as obj:
            sub = obj.admit("sender", "forward", forward("acme", "inbox"))
            reports = await obj.run_alarms(max_passes=10)
            assert len(reports) <= 4
            assert sent(obj, sub.id)[0].state == "delivered"
            assert obj.alarm_at is None
            lane = obj.space.scheduler.due_queue.get(MESSAGES)
            assert lane is not None and lane.due_at is None and lane.stalls == 0

    asyncio.run(go())


def test_the_alarm_is_armed_only_while_a_message_is_pending() -> None:
    async def go() -> None:
        async with deployment() as world:
            world.fail_deliveries(2, to_space="b")
            a = world.space("a")
            sub = a.admit("sender", "forward", forward("b", "inbox"))
            while True:
                fired = await world.fire_next()
                assert fired is not None, "the message was still pending with no alarm set"
                (message,) = sent(a, sub.id)
                if message.state != "pending":
                    break
                if message.attempts:
                    # Pending after a failed attempt: the lane (and the alarm) wait for its
                    # retry, no longer.
                    lane = a.space.scheduler.due_queue.get(MESSAGES)
                    assert lane is not None and lane.due_at == message.next_attempt_at
                    assert a.alarm_at == message.next_attempt_at
            assert message.state == "delivered"
            await world.run_alarms(max_passes=10)
            assert a.alarm_at is None and world.space("b").alarm_at is None

    asyncio.run(go())


def test_the_alarm_goes_quiet_after_a_message_fails_for_good() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="acme") as obj:
            obj.admit("sender", "forward", forward("nowhere", "inbox"))
            await obj.run_alarms(max_passes=10)
            assert obj.alarm_at is None

    asyncio.run(go())


def test_one_send_no_longer_keeps_the_alarm_armed_for_good() -> None:
    # The case as it was filed: an agent sends once, and the object must quiesce.
    from threadline import Application, Turn

    app = Application()

    @app.agent("notify")
    async def notify(turn: Turn) -> str:
        return await turn.send("billing", "invoices", {"text": "paid"})

    async def go() -> None:
        async with SimulatedObject(app, clock=ManualClock(START)) as obj:
            sub = obj.admit("orders", "notify", None)
            await obj.run_alarms(max_passes=20)
            assert obj.alarm_at is None
            (row,) = obj.storage.exec("SELECT state FROM tl_messages").rows
            assert row["state"] != "pending"
            assert obj.submission(sub.id).result == f"{sub.id}:send"

    asyncio.run(go())
