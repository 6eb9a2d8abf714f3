"""One target space that never answers holds only the messages sent to it: it backs off on its
own, while messages to a healthy space and into the sender's own space are delivered at once,
and the messages lane never parks over it. Once it answers again, its messages are delivered
in the order they were sent."""

from __future__ import annotations

import asyncio
from typing import Any

from messages_support import CONFIG, START, sent

from threadline import Application, ManualClock, Turn
from threadline.scheduling import MESSAGES, LaneState
from threadline.testing import SimulatedDeployment

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
