"""A message's submission says where it was sent from, and an application may say which
spaces may message it."""

from __future__ import annotations

import asyncio
import json

import pytest
from messages_support import CONFIG, START, build_app, forward, history, sent

from threadline import ManualClock, RuntimeConfig
from threadline.api.http import Request
from threadline.testing import SimulatedDeployment
from threadline.threads.records import MESSAGE_FAILED, SUBMISSION_SETTLED


def test_a_message_names_its_sending_space_and_thread_in_the_detail_and_the_settled_record(
) -> None:
    async def go() -> None:
        async with SimulatedDeployment(build_app(), clock=ManualClock(START),
                                       spaces=["a", "b"]) as world:
            world.space("a").admit("chat-7", "forward", forward("b", "inbox"))
            await world.run_alarms()
            b = world.space("b")
            (received,) = b.submissions("inbox")
            assert received.message_from == "a/chat-7" and received.submitted_by is None
            detail = await b.space.handle(Request.from_url(
                "GET", f"/v1/spaces/b/threads/inbox/submissions/{received.id}", {}, b""))
            assert detail.json()["message_from"] == "a/chat-7"
            settled = [json.loads(r["body_json"]) for r in history(b.storage, "inbox")
                       if r["kind"] == SUBMISSION_SETTLED]
            assert settled[0]["message_from"] == "a/chat-7"
            (own,) = world.space("a").submissions("chat-7")
            assert own.message_from is None  # admitted from outside any message

    asyncio.run(go())


def test_a_space_admits_messages_only_from_the_spaces_it_lists() -> None:
    app = build_app(CONFIG.model_copy(update={"message_senders": ("a",)}))

    async def go() -> None:
        async with SimulatedDeployment(app, clock=ManualClock(START),
                                       spaces=["a", "b", "c"]) as world:
            world.space("a").admit("t1", "forward", forward("b", "from-a"))
            refused = world.space("c").admit("t1", "forward", forward("b", "from-c"))
            world.space("b").admit("t1", "forward", forward("b", "from-b"))  # its own
            await world.run_alarms()
            b = world.space("b")
            assert [s.thread_id for s in b.submissions() if s.thread_id.startswith("from")] \
                == ["from-a", "from-b"]
            (message,) = sent(world.space("c"), refused.id)
            assert message.state == "failed"
            assert message.last_error == "Forbidden: this space admits messages only from a"
            failed = [r for r in history(world.space("c").storage, "t1")
                      if r["kind"] == MESSAGE_FAILED]
            assert len(failed) == 1

    asyncio.run(go())


@pytest.mark.parametrize("senders", [("a b",), ("threadline:health",), ("..",), ("",)])
def test_message_senders_must_be_space_ids(senders: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="message_senders"):
        RuntimeConfig(message_senders=senders)


def test_a_message_into_its_own_space_names_its_sending_thread_too() -> None:
    async def go() -> None:
        async with SimulatedDeployment(build_app(), clock=ManualClock(START),
                                       spaces=["a"]) as world:
            world.space("a").admit("chat-7", "forward", forward("a", "inbox"))
            await world.run_alarms()
            (received,) = world.space("a").submissions("inbox")
            assert received.message_from == "a/chat-7"

    asyncio.run(go())
