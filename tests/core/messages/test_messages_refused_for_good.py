"""A message refused for good (an agent the target does not register, input it refuses) is
marked failed with the reason, a ``message.failed`` record lands in the sender's Thread log in
the same transaction, and the sender's submission detail lists its messages and their
states."""

from __future__ import annotations

import asyncio
import json

from messages_support import START, build_app, deployment, forward, history, sent

from threadline import ManualClock
from threadline.api.http import Request
from threadline.maintenance.message_lane import NO_ROUTE
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.records import MESSAGE_FAILED


def test_a_message_to_an_agent_unknown_there_fails_with_a_record_in_the_senders_log() -> None:
    async def go() -> None:
        async with deployment() as world:
            a = world.space("a")
            sub = a.admit("sender", "forward", forward("b", "inbox", agent="nobody"))
            await world.run_alarms()
            # The sender settled: a message is not its Attempt's outcome.
            assert a.submission(sub.id).outcome is Outcome.COMPLETED
            (message,) = sent(a, sub.id)
            assert message.state == "failed" and message.failed_at is not None
            assert message.last_error is not None
            assert message.last_error.startswith("BindingUnavailable: no agent named 'nobody'")
            assert world.space("b").submissions("inbox") == []
            failed = [r for r in history(a.storage, "sender") if r["kind"] == MESSAGE_FAILED]
            assert len(failed) == 1
            assert failed[0]["record_id"] == f"{message.id}:failed"
            assert failed[0]["submission_id"] == sub.id
            assert json.loads(failed[0]["body_json"]) == {
                "message_id": message.id, "to_space": "b", "to_thread": "inbox", "hops": 1,
                "reason": message.last_error,
            }
            # Refused for good: tried once, never again.
            assert len([d for d in world.deliveries if d.message_id == message.id]) == 1

    asyncio.run(go())


def test_a_local_message_refused_for_good_fails_the_same_way() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="acme",
                                   check_alarm_invariant=True) as obj:
            sub = obj.admit("sender", "forward", forward("acme", "inbox", agent="nobody"))
            await obj.run_alarms()
            (message,) = sent(obj, sub.id)
            assert message.state == "failed"
            assert (message.last_error or "").startswith("BindingUnavailable:")
            kinds = [r["kind"] for r in history(obj.storage, "sender")]
            assert kinds.count(MESSAGE_FAILED) == 1
            assert obj.submissions("inbox") == []

    asyncio.run(go())


def test_a_message_to_another_space_without_a_router_fails_with_no_route() -> None:
    async def go() -> None:
        async with SimulatedObject(build_app(), clock=ManualClock(START), space="acme",
                                   check_alarm_invariant=True) as obj:
            sub = obj.admit("sender", "forward", forward("elsewhere", "inbox"))
            await obj.run_alarms()
            (message,) = sent(obj, sub.id)
            assert message.state == "failed" and message.last_error == NO_ROUTE

    asyncio.run(go())


def test_the_senders_submission_detail_lists_its_messages_and_their_states() -> None:
    async def go() -> None:
        async with deployment() as world:
            a = world.space("a")
            good = a.admit("sender", "forward", forward("b", "inbox"))
            bad = a.admit("other", "forward", forward("b", "inbox", agent="nobody"))
            await world.run_alarms()

            async def detail(thread: str, submission_id: str) -> dict[str, object]:
                path = f"/v1/spaces/a/threads/{thread}/submissions/{submission_id}"
                response = await a.space.handle(Request.from_url("GET", path, {}, b""))
                assert response.status == 200
                loaded = json.loads(response.body)
                assert isinstance(loaded, dict)
                return loaded

            (delivered,) = (await detail("sender", good.id))["messages"]  # type: ignore[misc]
            (target,) = world.space("b").submissions("inbox")
            assert delivered == {
                "id": f"{good.id}:send", "to_space": "b", "to_thread": "inbox",
                "agent": "echo", "state": "delivered", "attempts": 1,
                "next_attempt_at": None, "error": None, "submission_id": target.id,
                "created_at": delivered["created_at"],
                "delivered_at": delivered["delivered_at"], "failed_at": None,
            }
            (failed,) = (await detail("other", bad.id))["messages"]  # type: ignore[misc]
            assert failed["state"] == "failed" and failed["submission_id"] is None
            assert failed["error"].startswith("BindingUnavailable:")
            assert failed["failed_at"] is not None

    asyncio.run(go())
