"""An object that its alarm starts after a restart still knows its space, in real workerd.

The platform gives an object its name (``ctx.id.name``, from ``getByName(space)``) when a
request or an RPC reaches it, not when its alarm starts it. Here the runtime is killed in the
middle of a webhook delivery and restarted, and nothing but the object's alarm wakes it again
(the warm-up request goes to another object): every envelope, those posted after the restart
included, still names the space.

Reuses the webhook module's receiver, bundle and runtime fixtures.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from test_workerd_maintenance import kill_workerd
from test_workerd_webhook import (  # noqa: F401 (fixtures)
    DELIVERY_TIMEOUT_S,
    SECRET,
    Received,
    Receiver,
    Reply,
    receiver,
    start,
    webhook_bundle,
)
from workerd_runtime import TOKEN, Runtime, wait_for

import threadline


def test_an_object_started_by_its_alarm_after_a_restart_still_names_its_space(
    receiver: Receiver, start: Callable[[Path], Runtime], tmp_path: Path  # noqa: F811
) -> None:
    space, thread, count = "named-after-restart", "t", 4
    release = threading.Event()
    held: list[Received] = []

    def reply(request: Received) -> Reply:
        if request.path != "/hook":
            return Reply()
        if not held:  # the first delivery never gets its answer: the runtime dies under it
            held.append(request)
            return Reply(hold=release)
        return Reply(200)

    receiver.reply = reply
    before = len(receiver.received)
    first = start(tmp_path)
    try:
        submitted = first.request(
            f"/v1/spaces/{space}/threads/{thread}/submissions", method="POST", token=TOKEN,
            body=json.dumps({"agent": "chatty", "input": {"records": count}}).encode())
        assert submitted.status == 202, (submitted.status, submitted.body, first.output())
        wait_for(lambda: held, timeout=DELIVERY_TIMEOUT_S, what="the first webhook request")
        kill_workerd(first)
    finally:
        release.set()
        first.stop()

    # No request to the space's object: its persisted alarm alone starts it again.
    second = start(tmp_path)

    def hooks() -> list[Received]:
        return [r for r in receiver.received[before:] if r.path == "/hook"]

    def redelivered() -> bool:
        return {record["body"]["n"] for request in hooks()[1:]
                for record in json.loads(request.body)["records"]
                if record["kind"] == "record"} >= set(range(count))

    wait_for(redelivered, timeout=DELIVERY_TIMEOUT_S,
             what="every record delivered by the alarm after the restart")
    requests = hooks()
    assert len(requests) >= 2
    for request in requests:
        threadline.verify_signature(request.body, request.headers["threadline-signature"],
                                    SECRET)
        assert json.loads(request.body)["space"] == space, (request.body, second.output())
