"""What another space's object sends is admitted once, under ids derived from the message id
alone: the bounds of what is accepted, the stable key and submission id a redelivery finds, and
the agent a message without one goes to."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from messages_support import START, build_app

from threadline import ManualClock, RuntimeConfig
from threadline.testing import SimulatedObject
from threadline.threads.message_rows import MAX_MESSAGE_ID_CHARS, inbound_key, inbound_submission_id
from threadline.threads.routing import Accepted, Refused


async def _admit(*messages: tuple[Any, ...], config: RuntimeConfig | None = None) -> list[Any]:
    app = build_app() if config is None else build_app(config)
    async with SimulatedObject(app, clock=ManualClock(START), space="b") as obj:
        return [obj.space.admit_message(*message) for message in messages]


def test_message_ids_of_one_and_of_the_most_characters_are_admitted() -> None:
    for message_id in ("m", "m" * MAX_MESSAGE_ID_CHARS):
        [verdict] = asyncio.run(_admit((message_id, "t", "echo", "{}")))
        assert isinstance(verdict, Accepted), verdict
        assert verdict.submission_id == inbound_submission_id(message_id)


def test_an_input_of_exactly_the_targets_body_limit_is_admitted() -> None:
    config = RuntimeConfig(max_body_bytes=1_024)
    text = json.dumps("x" * 1_022)
    assert len(text.encode()) == 1_024
    [verdict] = asyncio.run(_admit(("m:send", "t", "echo", text), config=config))
    assert isinstance(verdict, Accepted), verdict


def test_an_input_nested_deeper_than_the_targets_limit_is_refused() -> None:
    config = RuntimeConfig(max_json_depth=3)
    [deep, flat] = asyncio.run(_admit(("m:deep", "t", "echo", "[[[[1]]]]"),
                                      ("m:flat", "t", "echo", "[[[1]]]"), config=config))
    assert isinstance(deep, Refused)
    assert deep.reason == "ValidationFailed: input is nested deeper than max_json_depth (3)"
    assert isinstance(flat, Accepted)


def test_a_key_held_with_the_same_input_and_agent_answers_with_that_submission() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="b") as obj:
            held = obj.admit("t", "echo", {"n": 1}, inbound_key("m:send"))
            verdict = obj.space.admit_message("m:send", "t", "echo", '{"n": 1}')
            assert verdict == Accepted(held.id)
            assert len(obj.submissions("t")) == 1

    asyncio.run(go())


def test_a_redelivery_naming_no_agent_keeps_its_first_agent_after_the_thread_moved_on() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="b") as obj:
            first = obj.space.admit_message("m:send", "t", "echo", '{"n":1}')
            obj.admit("t", "fanout", {"space": "a"})
            again = obj.space.admit_message("m:send", "t", None, '{"n":1}')
            assert isinstance(first, Accepted) and again == first
            assert [s.agent for s in obj.submissions("t")] == ["echo", "fanout"]

    asyncio.run(go())


def test_a_redelivery_naming_another_agent_is_refused_as_a_conflict() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="b") as obj:
            first = obj.space.admit_message("m:send", "t", "echo", '{"n":1}')
            other = obj.space.admit_message("m:send", "t", "forward", '{"n":1}')
            assert isinstance(first, Accepted)
            assert isinstance(other, Refused) and other.reason.startswith("Conflict:"), other
            assert [s.agent for s in obj.submissions("t")] == ["echo"]

    asyncio.run(go())


def test_a_message_naming_no_agent_goes_to_the_threads_latest_agent() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="b") as obj:
            obj.admit("t", "echo", {"n": 0})
            verdict = obj.space.admit_message("m:send", "t", None, '{"n":1}')
            assert isinstance(verdict, Accepted), verdict
            assert [s.agent for s in obj.submissions("t")] == ["echo", "echo"]

    asyncio.run(go())


def test_the_inbound_key_is_the_message_id_with_hashes_made_dots() -> None:
    assert inbound_key("sub_1:send") == "msg:sub_1:send"
    assert inbound_key("sub_1:send#2") == "msg:sub_1:send.2"


def test_a_message_id_unfit_for_a_key_gets_a_stable_digest_key() -> None:
    # Stored in the target's ledger: a redelivery after a deploy must find the same key.
    assert inbound_key("sub 1:send") == "msg:c57d65311d6cf27df4461ca6c2240abc88be058bc7b7e60c"
    assert inbound_key("m" * 200) == "msg:24b0fe308faf590bd13c8db66eb84fda2afd760404dacee0"


def test_the_inbound_submission_id_is_stable() -> None:
    assert inbound_submission_id("sub_1:send") == "sub_48d6fdfedaefeadcde525ec2816836c2"
