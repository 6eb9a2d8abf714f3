"""Messages in real workerd: an agent in space A sends to a Thread of space B; the messages
lane of A's object delivers it through the Worker's ``THREADS`` binding (the RPC
``admit_message`` of B's object), B admits it once and its alarm settles it. A message into
A's own space is admitted there, and one naming an agent B does not register fails with a
``message.failed`` record in the sender's log. Every wait is a bounded poll."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from workerd_runtime import TOKEN, Runtime, wait_for

SETTLE_TIMEOUT_S = 30.0


def _thread(space: str, thread: str) -> str:
    return f"/v1/spaces/{space}/threads/{thread}"


def _post(runtime: Runtime, path: str, payload: Any) -> Any:
    reply = runtime.request(path, method="POST", token=TOKEN, body=json.dumps(payload).encode())
    assert reply.status in (200, 202), (reply.status, reply.body, runtime.output())
    return reply


def _get(runtime: Runtime, path: str) -> Any:
    reply = runtime.request(path, token=TOKEN)
    assert reply.status == 200, (reply.status, reply.body, runtime.output())
    return reply.json()


def _until(runtime: Runtime, path: str, check: Callable[[Any], bool], what: str) -> Any:
    def poll() -> Any:
        detail = _get(runtime, path)
        return detail if check(detail) else None

    return wait_for(poll, timeout=SETTLE_TIMEOUT_S, what=what)


def _relay(runtime: Runtime, space: str, thread: str, target: dict[str, Any]) -> str:
    reply = _post(runtime, _thread(space, thread) + "/submissions",
                  {"agent": "relay", "input": target})
    return str(reply.headers["Location"])


def _sent(runtime: Runtime, location: str) -> dict[str, Any]:
    """The sender's detail once it settled and its message left ``pending``."""
    detail = _until(
        runtime, location,
        lambda d: d["state"] == "settled" and [m["state"] for m in d["messages"]] not in (
            [], ["pending"]),
        "the sender to settle and its message to be delivered",
    )
    assert detail["outcome"] == "completed", detail
    (message,) = detail["messages"]
    return dict(message)


def test_a_message_from_space_a_is_admitted_and_settled_in_space_b(workerd: Runtime) -> None:
    assert _get(workerd, "/_settlements/msg-b") == {}  # installs space B's settlement log
    sender = _relay(workerd, "msg-a", "out", {"space": "msg-b", "thread": "in", "text": "hi"})
    message = _sent(workerd, sender)
    assert (message["state"], message["attempts"]) == ("delivered", 1), message
    assert (message["to_space"], message["to_thread"], message["agent"]) == (
        "msg-b", "in", "echo")
    target = _thread("msg-b", "in") + f"/submissions/{message['submission_id']}"
    done = _until(workerd, target, lambda d: d["state"] == "settled",
                  "the message's submission to settle in space B")
    assert (done["outcome"], done["agent"], done["result"]) == ("completed", "echo",
                                                                {"text": "hi"})
    assert done["idempotency_key"].startswith("msg:")
    # Admitted once: space B's Thread holds that one submission, settled once.
    assert _get(workerd, _thread("msg-b", "in"))["submissions"] == 1
    assert _get(workerd, _thread("msg-a", "in"))["submissions"] == 0
    log = _get(workerd, "/_settlements/msg-b")
    assert log.get(message["submission_id"]) and len(log[message["submission_id"]]) == 1, log


def test_a_message_into_the_senders_own_space_is_admitted_there(workerd: Runtime) -> None:
    sender = _relay(workerd, "msg-c", "out", {"space": "msg-c", "thread": "in", "text": "me"})
    message = _sent(workerd, sender)
    # The object knows its own space (the name it was addressed by): the message was
    # admitted in the lane's own transaction, never sent through the binding.
    assert (message["state"], message["attempts"]) == ("delivered", 0), message
    target = _thread("msg-c", "in") + f"/submissions/{message['submission_id']}"
    done = _until(workerd, target, lambda d: d["state"] == "settled",
                  "the local message's submission to settle")
    assert done["result"] == {"text": "me"}


def test_a_message_to_an_agent_space_b_lacks_fails_in_the_senders_log(workerd: Runtime) -> None:
    sender = _relay(workerd, "msg-d", "out",
                    {"space": "msg-e", "thread": "in", "text": "x", "agent": "nobody"})
    message = _sent(workerd, sender)
    assert message["state"] == "failed", message
    assert message["error"].startswith("BindingUnavailable:"), message
    history = _get(workerd, _thread("msg-d", "out") + "/history")
    kinds = [record["kind"] for record in history["records"]]
    assert kinds.count("message.failed") == 1, history
