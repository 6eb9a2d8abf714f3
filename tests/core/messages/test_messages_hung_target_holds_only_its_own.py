"""One target space that never answers holds only the messages sent to it: it backs off on its
own, while messages to a healthy space and into the sender's own space are delivered at once,
and the messages lane never parks over it. Once it answers again, its messages are delivered
in the order they were sent. A message sent while another space's call hangs goes without
waiting for that call."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from messages_support import CONFIG, START, sent

from threadline import Application, ManualClock, Turn
from threadline.maintenance.message_lane import (
    MESSAGE_CALL_TIMEOUT_MS,
    MESSAGES_DISPATCH_TIMEOUT_MS,
    POLL_MS,
    MessageDelivery,
)
from threadline.scheduling import MESSAGES, Failpoints, LaneState, build_scheduler
from threadline.storage import SqliteStorage, migrate
from threadline.testing import SimulatedDeployment
from threadline.threads import message_rows as rows
from threadline.threads.agents import AgentRegistry
from threadline.threads.routing import Accepted, MessageEnvelope, Verdict

#: What the hung space gets before the others: more calls than one wave's allowance holds.
HUNG_MESSAGES = 4


def build_app() -> Application:
    """``scatter`` sends ``HUNG_MESSAGES`` messages to ``hung``, then one to ``healthy`` and
    one into its own space ``own``; ``echo`` returns what it got."""
    app = Application(CONFIG)

    @app.agent("scatter")
    async def scatter(turn: Turn) -> Any:
        spaces = turn.input
        assert isinstance(spaces, dict)
        for n in range(HUNG_MESSAGES):
            await turn.send(spaces["hung"], "inbox", {"n": n}, agent="echo")
        await turn.send(spaces["healthy"], "inbox", {"n": "healthy"}, agent="echo")
        await turn.send(spaces["own"], "inbox", {"n": "own"}, agent="echo")
        return "sent"

    @app.agent("one")
    async def one(turn: Turn) -> Any:
        message = turn.input
        assert isinstance(message, dict)
        return await turn.send(message["space"], "inbox", {"n": message["n"]}, agent="echo")

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return await turn.step("say", lambda: {"got": turn.input})

    return app


def _world() -> SimulatedDeployment:
    return SimulatedDeployment(build_app(), clock=ManualClock(START), spaces=("a", "b", "c"),
                               check_alarm_invariant=True)


async def _until_delivered(world: SimulatedDeployment, space: str, *, within_ms: int) -> int:
    """Fire alarms until ``space``'s inbox holds a settled submission; the simulated time that
    took (fails past ``within_ms``)."""
    while not any(s.settled_at for s in world.space(space).submissions("inbox")):
        fired = await world.fire_next()
        assert fired is not None, f"no alarm set while the message to {space!r} is pending"
        assert world.clock.now_ms() - START <= within_ms, (
            f"the message to {space!r} was not delivered within {within_ms} ms")
    return world.clock.now_ms() - START


def test_a_hung_target_holds_only_its_own_messages() -> None:
    async def go() -> None:
        async with _world() as world:
            hung = world.hang_deliveries("c")
            a = world.space("a")
            a.admit("sender", "scatter", {"hung": "c", "healthy": "b", "own": "a"})
            # Promptly: within one call's bound of the send, not after the hung calls.
            await _until_delivered(world, "b", within_ms=11_000)
            await _until_delivered(world, "a", within_ms=11_000)
            await world.run_alarms(until=START + 600_000)
            assert world.space("c").submissions("inbox") == []
            lane = a.space.scheduler.due_queue.get(MESSAGES)
            assert lane is not None and lane.state is not LaneState.PARKED, lane
            # Per target: only the oldest message to c is tried, and it waits out its backoff
            # between calls (at most the cap, plus the 10 s call), so the calls are spaced.
            (head,) = [d.message_id for d in world.deliveries if d.to_space == "c"][:1]
            assert {d.message_id for d in world.deliveries if d.to_space == "c"} == {head}
            assert 600_000 // (10_000 + CONFIG.alarm_backoff_cap_ms) <= hung.calls <= 600_000 // (
                10_000 + CONFIG.alarm_backoff_cap_ms // 2) + 1

    asyncio.run(go())


def test_a_target_that_recovers_gets_its_messages_in_the_order_they_were_sent() -> None:
    async def go() -> None:
        async with _world() as world:
            hung = world.hang_deliveries("c")
            a = world.space("a")
            a.admit("sender", "scatter", {"hung": "c", "healthy": "b", "own": "a"})
            await world.run_alarms(until=START + 120_000)
            # One more, sent while the others back off: it goes after them all the same.
            later = a.admit("later", "one", {"space": "c", "n": HUNG_MESSAGES})
            while not sent(a, later.id):
                assert await world.fire_next() is not None
            assert world.space("c").submissions("inbox") == []
            hung.release()
            await world.run_alarms()
            inbox = world.space("c").submissions("inbox")
            assert [s.input for s in inbox] == [{"n": n} for n in range(HUNG_MESSAGES + 1)]
            assert all(s.settled_at is not None for s in inbox)
            assert a.alarm_at is None

    asyncio.run(go())


class _OneHangs:
    """A router whose calls into ``c`` never answer; every other space accepts at once."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def deliver(self, envelope: MessageEnvelope) -> Verdict:
        self.calls.append(envelope.to_space)
        if envelope.to_space == "c":
            await asyncio.Event().wait()
        return Accepted(f"sub_{envelope.to_space}")


def test_a_message_sent_while_a_call_hangs_does_not_wait_for_that_call() -> None:
    async def go() -> None:
        storage = SqliteStorage(":memory:")
        migrate(storage)
        clock = ManualClock(START)
        rng = random.Random(0)
        scheduler = build_scheduler(storage, clock, CONFIG, rng, Failpoints())
        router = _OneHangs()
        delivery = MessageDelivery(storage, scheduler.gate, AgentRegistry(), CONFIG, clock, rng,
                                   scheduler.failpoints, space="a", router=router)

        def send(message_id: str, to_space: str) -> None:
            storage.transaction(lambda: rows.enqueue_message(
                storage, message_id=message_id, from_thread="t", from_submission="sub_1",
                to_space=to_space, to_thread="inbox", input_json="{}",
                now=clock.now_ms()))

        send("sub_1:send", "c")
        wave = asyncio.ensure_future(delivery.run_lane(START, START + MESSAGES_DISPATCH_TIMEOUT_MS))
        for _ in range(5):
            await asyncio.sleep(0)
        assert router.calls == ["c"]
        send("sub_1:send#2", "b")
        clock.advance(POLL_MS)
        for _ in range(20):
            await asyncio.sleep(0)
        # c's call is still in flight (its bound is 10 s), b's message is delivered already.
        assert not wave.done() and router.calls == ["c", "b"]
        states = {m.to_space: m.state for m in rows.of_submission(storage, "sub_1")}
        assert states == {"c": "pending", "b": "delivered"}
        clock.advance(MESSAGE_CALL_TIMEOUT_MS)
        assert await wave == rows.next_due(storage)
        storage.close()

    asyncio.run(go())
