"""A delivery that fails in transit (the target unreachable, the call timing out) is retried
with a growing, durable backoff: each attempt is charged before the call, so the retry time
survives the loss of the object, and the message is delivered once the target answers."""

from __future__ import annotations

import asyncio
import random

from messages_support import CONFIG, START, deployment, forward, sent

from threadline import ManualClock
from threadline.maintenance.message_lane import MessageDelivery
from threadline.scheduling import Failpoints, build_scheduler
from threadline.storage import SqliteStorage, migrate
from threadline.threads import message_rows as rows
from threadline.threads.agents import AgentRegistry
from threadline.threads.model import Outcome
from threadline.threads.routing import Accepted, MessageEnvelope, Verdict


def test_a_transient_delivery_failure_is_retried_with_a_growing_durable_backoff() -> None:
    async def go() -> None:
        async with deployment() as world:
            world.fail_deliveries(3, to_space="b")
            a = world.space("a")
            sub = a.admit("sender", "forward", forward("b", "inbox"))
            retries: list[int] = []
            for _ in range(3):
                # Alarm by alarm until the lane's next attempt has been made.
                while not sent(a, sub.id) or sent(a, sub.id)[0].attempts == len(retries):
                    assert await world.fire_next() is not None
                (message,) = sent(a, sub.id)
                assert message.state == "pending"
                assert message.last_error == "ConnectionError"
                assert message.next_attempt_at is not None
                retries.append(message.next_attempt_at - world.clock.now_ms())
            # Jittered over [b/2, b] with b doubling from the backoff base: each wait is at
            # least half the last bound, and all stay within the cap.
            base = CONFIG.alarm_backoff_base_ms
            for attempt, wait in enumerate(retries):
                bound = min(CONFIG.alarm_backoff_cap_ms, base << attempt)
                assert bound // 2 <= wait <= bound, (attempt, wait, retries)
            await world.run_alarms()
            (message,) = sent(a, sub.id)
            assert message.state == "delivered" and message.attempts == 4
            (target,) = world.space("b").submissions("inbox")
            assert target.outcome is Outcome.COMPLETED
            assert [d.verdict is None for d in world.deliveries] == [True, True, True, False]

    asyncio.run(go())


def test_a_retry_time_survives_the_loss_of_the_sender() -> None:
    async def go() -> None:
        async with deployment() as world:
            world.fail_deliveries(1, to_space="b")
            a = world.space("a")
            sub = a.admit("sender", "forward", forward("b", "inbox"))
            while not sent(a, sub.id) or sent(a, sub.id)[0].attempts == 0:
                assert await world.fire_next() is not None
            (before,) = sent(a, sub.id)
            await a.evict()
            (after,) = sent(a, sub.id)
            assert after.next_attempt_at == before.next_attempt_at > world.clock.now_ms()
            await world.run_alarms()
            assert sent(a, sub.id)[0].state == "delivered"
            assert len(world.space("b").submissions("inbox")) == 1

    asyncio.run(go())


class _Hanging:
    """A router whose calls never answer until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def deliver(self, envelope: MessageEnvelope) -> Verdict:
        self.calls += 1
        await self.release.wait()
        return Accepted("sub_x")


def _delivery(storage: SqliteStorage, clock: ManualClock, router: _Hanging) -> MessageDelivery:
    rng = random.Random(0)
    scheduler = build_scheduler(storage, clock, CONFIG, rng, Failpoints())
    return MessageDelivery(storage, scheduler.gate, AgentRegistry(), CONFIG, clock, rng,
                           scheduler.failpoints, space="a", router=router,
                           call_timeout_ms=1_000)


def _pending(storage: SqliteStorage, now: int) -> None:
    storage.transaction(lambda: rows.enqueue_message(
        storage, message_id="sub_1:send", from_thread="t", from_submission="sub_1",
        to_space="b", to_thread="inbox", input_json='{"n":1}', now=now))


def test_a_call_that_outlives_its_timeout_is_a_transient_failure() -> None:
    async def go() -> None:
        storage = SqliteStorage(":memory:")
        migrate(storage)
        clock = ManualClock(START)
        router = _Hanging()
        _pending(storage, START)
        delivery = _delivery(storage, clock, router)
        wave = asyncio.ensure_future(delivery.run_lane(START, START + 30_000))
        for _ in range(5):
            await asyncio.sleep(0)
        assert router.calls == 1 and not wave.done()
        clock.set(START + 1_000)  # the call's bound
        next_due = await wave
        (message,) = rows.of_submission(storage, "sub_1")
        assert message.state == "pending" and message.attempts == 1
        assert message.last_error == "TimedOut"
        assert message.next_attempt_at is not None and message.next_attempt_at > START
        # Tried once per wave: the lane is next due at the message's retry.
        assert next_due == message.next_attempt_at
        storage.close()

    asyncio.run(go())


def test_a_call_that_would_not_fit_before_the_wave_deadline_is_not_started() -> None:
    async def go() -> None:
        storage = SqliteStorage(":memory:")
        migrate(storage)
        clock = ManualClock(START)
        router = _Hanging()
        _pending(storage, START)
        delivery = _delivery(storage, clock, router)
        # 999 ms left, the call's bound is 1000 ms: nothing is charged, the lane stays due.
        assert await delivery.run_lane(START, START + 999) == START
        (message,) = rows.of_submission(storage, "sub_1")
        assert router.calls == 0 and message.attempts == 0
        assert message.next_attempt_at == START
        storage.close()

    asyncio.run(go())
