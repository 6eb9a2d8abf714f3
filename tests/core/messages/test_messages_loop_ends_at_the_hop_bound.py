"""A chain of messages ends: each message carries a hop count (one more than the message its
sending submission came from), across spaces and restarts, and one past
``RuntimeConfig.max_message_hops`` fails with ``message.failed`` naming the loop instead of
being delivered. The bound is configurable and validated."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from messages_support import START, history, sent
from pydantic import ValidationError

from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.testing import SimulatedDeployment
from threadline.threads.records import MESSAGE_FAILED
from threadline.threads.routing import Accepted, Refused

BOUND = 4


def build_app(config: RuntimeConfig) -> Application:
    """``bounce`` sends its input on to ``next``, swapping ``next`` and ``then``: A -> B -> A."""
    app = Application(config)

    @app.agent("bounce")
    async def bounce(turn: Turn) -> Any:
        route = turn.input
        assert isinstance(route, dict)
        back = {"next": route["then"], "then": route["next"]}
        return await turn.send(route["next"], "ping", back, agent="bounce")

    return app


def _world(config: RuntimeConfig) -> SimulatedDeployment:
    return SimulatedDeployment(build_app(config), clock=ManualClock(START), spaces=("a", "b"),
                               check_alarm_invariant=True)


def _chain(world: SimulatedDeployment) -> list[Any]:
    """Every bounce submission of both spaces, oldest first, as (space, hops it came with)."""
    runs = [(s.created_at, name, s.message_hops, s)
            for name, obj in world.objects.items() for s in obj.submissions("ping")]
    return sorted(runs, key=lambda run: (run[0], run[2]))


@pytest.mark.parametrize("spaces", [("a", "b"), ("a", "a")], ids=["across-spaces", "own-space"])
def test_a_loop_of_messages_ends_with_message_failed_at_the_hop_bound(
    spaces: tuple[str, str],
) -> None:
    async def go() -> None:
        async with _world(RuntimeConfig(max_message_hops=BOUND)) as world:
            first, second = spaces
            origin = world.space(first).admit("ping", "bounce", {"next": second, "then": first})
            await world.run_alarms(max_passes=200)
            chain = _chain(world)
            # The submission from outside, then one per hop up to the bound.
            assert [hops for _, _, hops, _ in chain] == list(range(BOUND + 1))
            assert chain[0][3].id == origin.id
            *_, (_, last_space, _, last) = chain
            (message,) = sent(world.space(last_space), last.id)
            assert message.state == "failed" and message.hops == BOUND + 1
            assert message.last_error is not None
            assert message.last_error.startswith("MessageLoop:")
            assert f"hop {BOUND + 1}" in message.last_error
            assert f"bound of {BOUND}" in message.last_error
            (record,) = [r for r in history(world.space(last_space).storage, "ping")
                         if r["kind"] == MESSAGE_FAILED]
            body = json.loads(record["body_json"])
            assert body["hops"] == BOUND + 1 and body["reason"] == message.last_error
            # Nothing keeps an alarm once the loop has ended.
            assert all(obj.alarm_at is None for obj in world.objects.values())

    asyncio.run(go())


def test_the_hop_count_survives_the_loss_of_the_sender_and_of_the_target() -> None:
    async def go() -> None:
        async with _world(RuntimeConfig(max_message_hops=BOUND)) as world:
            a, b = world.space("a"), world.space("b")
            world.fail_deliveries(1, to_space="b")
            origin = a.admit("ping", "bounce", {"next": "b", "then": "a"})
            # Until a's first delivery failed, then the sender is lost while it is pending.
            while not sent(a, origin.id) or not sent(a, origin.id)[0].attempts:
                assert await world.fire_next() is not None
            await a.evict()
            (message,) = sent(a, origin.id)
            assert message.state == "pending" and message.hops == 1
            # Until b admitted it, then b is lost before its submission runs.
            while not b.submissions("ping"):
                assert await world.fire_next() is not None
            await b.evict()
            (admitted,) = b.submissions("ping")
            assert admitted.message_hops == 1 and admitted.settled_at is None
            while not sent(b, admitted.id):
                assert await world.fire_next() is not None
            assert sent(b, admitted.id)[0].hops == 2

    asyncio.run(go())


def test_a_target_refuses_a_message_past_its_own_bound() -> None:
    async def go() -> None:
        async with _world(RuntimeConfig(max_message_hops=BOUND)) as world:
            b = world.space("b").space
            args = ("sub_x:send", "ping", "bounce", '{"next": "a", "then": "b"}')
            refused = b.admit_message(*args, hops=BOUND + 1)
            assert isinstance(refused, Refused) and refused.reason.startswith("MessageLoop:")
            bad = b.admit_message(*args, hops=0)
            assert isinstance(bad, Refused) and bad.reason.startswith("ValidationFailed:")
            accepted = b.admit_message(*args, hops=BOUND)
            assert isinstance(accepted, Accepted)
            (submission,) = world.space("b").submissions("ping")
            assert submission.message_hops == BOUND

    asyncio.run(go())


def test_the_hop_bound_is_configurable_and_validated() -> None:
    assert RuntimeConfig().max_message_hops == 16
    assert RuntimeConfig(max_message_hops=1).max_message_hops == 1
    assert RuntimeConfig(max_message_hops=1_000).max_message_hops == 1_000
    for bad in (0, -1, 1_001, "many", 2.5):
        with pytest.raises(ValidationError, match="max_message_hops"):
            RuntimeConfig(max_message_hops=bad)  # type: ignore[arg-type]


def _relay_app(config: RuntimeConfig, *, delay: bool) -> Application:
    """``relay`` hands its input to another Thread of its space with ``turn.submit`` (at once,
    or a second later), whose ``bounce`` messages it back: a loop through a submission."""
    app = build_app(config)

    @app.agent("relay")
    async def relay(turn: Turn) -> Any:
        route = turn.input
        assert isinstance(route, dict)
        later = timedelta(seconds=1) if delay else None
        return await turn.submit("hop", {"next": route["then"], "then": route["next"]},
                                 agent="bounce_to_relay", not_before=later)

    @app.agent("bounce_to_relay")
    async def bounce_to_relay(turn: Turn) -> Any:
        route = turn.input
        assert isinstance(route, dict)
        back = {"next": route["then"], "then": route["next"]}
        return await turn.send(route["next"], "ping", back, agent="relay")

    return app


@pytest.mark.parametrize("delay", [False, True], ids=["at-once", "delayed"])
def test_a_loop_that_passes_through_turn_submit_still_ends_at_the_hop_bound(
    delay: bool,
) -> None:
    async def go() -> None:
        app = _relay_app(RuntimeConfig(max_message_hops=BOUND), delay=delay)
        async with SimulatedDeployment(app, clock=ManualClock(START), spaces=("a", "b"),
                                       check_alarm_invariant=True) as world:
            a = world.space("a")
            a.admit("ping", "relay", {"next": "b", "then": "a"})
            await world.run_alarms(max_passes=400)
            hops = sorted(s.message_hops for obj in world.objects.values()
                          for s in obj.submissions("hop"))
            # Each submission the relay makes counts on from the message it came from, up to
            # the bound: the message past it fails instead of starting the loop over.
            assert hops == list(range(BOUND + 1))
            failed = [m for obj in world.objects.values() for s in obj.submissions("hop")
                      for m in sent(obj, s.id) if m.state == "failed"]
            assert len(failed) == 1 and failed[0].hops == BOUND + 1
            assert all(obj.alarm_at is None for obj in world.objects.values())

    asyncio.run(go())
