"""What another space's object sends is checked before anything is written: a message whose
arguments are malformed (as an RPC could carry them), whose input this deployment refuses, or
whose idempotency key the target Thread already holds with other input is refused for good,
with the reason, and admits nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from messages_support import START, build_app

from threadline import ManualClock, RuntimeConfig
from threadline.testing import SimulatedObject
from threadline.threads.message_rows import inbound_key
from threadline.threads.routing import Accepted, Refused


async def _verdict(*args: Any, config: RuntimeConfig | None = None) -> Any:
    app = build_app() if config is None else build_app(config)
    async with SimulatedObject(app, clock=ManualClock(START), space="b") as obj:
        verdict = obj.space.admit_message(*args)
        assert obj.submissions() == [] or isinstance(verdict, Accepted)
        return verdict


@pytest.mark.parametrize(("args", "reason"), [
    ((None, "t", "echo", "{}"), "ValidationFailed: a message id"),
    (("", "t", "echo", "{}"), "ValidationFailed: a message id"),
    (("x" * 257, "t", "echo", "{}"), "ValidationFailed: a message id"),
    (("m:send", 5, "echo", "{}"), "ValidationFailed: thread"),
    (("m:send", "../t", "echo", "{}"), "ValidationFailed: thread"),
    (("m:send", "t", 7, "{}"), "ValidationFailed: agent"),
    (("m:send", "t", "nobody", "{}"), "BindingUnavailable: no agent named 'nobody'"),
    (("m:send", "t", None, "{}"), "ValidationFailed: agent is required"),
    (("m:send", "t", "echo", None), "ValidationFailed: a message's input"),
    (("m:send", "t", "echo", "{not json"), "ValidationFailed: input is not JSON text"),
])
def test_a_malformed_inbound_message_is_refused_and_admits_nothing(
    args: tuple[Any, ...], reason: str
) -> None:
    verdict = asyncio.run(_verdict(*args))
    assert isinstance(verdict, Refused) and verdict.reason.startswith(reason), verdict


def test_an_inbound_message_larger_than_the_targets_body_limit_is_refused() -> None:
    config = RuntimeConfig(max_body_bytes=1_024)
    verdict = asyncio.run(_verdict("m:send", "t", "echo", json.dumps("x" * 2_000),
                                   config=config))
    assert isinstance(verdict, Refused) and "larger than 1024 bytes" in verdict.reason


def test_a_key_already_held_with_other_input_refuses_the_message() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="b") as obj:
            obj.admit("t", "echo", {"mine": True}, inbound_key("m:send"))
            verdict = obj.space.admit_message("m:send", "t", "echo", '{"n":1}')
            assert isinstance(verdict, Refused) and verdict.reason.startswith("Conflict:")
            assert len(obj.submissions("t")) == 1

    asyncio.run(go())


def test_a_redelivered_message_keeps_its_first_agent_even_when_it_names_none() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="b") as obj:
            first = obj.space.admit_message("m:send", "t", "echo", '{"n":1}')
            again = obj.space.admit_message("m:send", "t", None, '{"n":1}')
            assert isinstance(first, Accepted) and again == first
            assert [s.agent for s in obj.submissions("t")] == ["echo"]

    asyncio.run(go())
