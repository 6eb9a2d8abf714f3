"""Subscribers in real workerd: records emitted by submissions on two Threads, and their
settlement records, reach a callable subscriber (in batches of two) and a required one, in log
order per Thread, through the object's live alarm; the required one is drained before each
Thread's next submission runs, and ``/maintenance`` shows both caught up at the log's end.

The ``subs-*`` spaces are served by ``SubscribedThreadObject`` (``probe/probe_entry.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workerd_runtime import TOKEN, Runtime, wait_for

SPACE = "subs-live"
TIMEOUT_S = 30.0


def _post(runtime: Runtime, thread: str, records: int) -> str:
    reply = runtime.request(f"/v1/spaces/{SPACE}/threads/{thread}/submissions", method="POST",
                            token=TOKEN,
                            body=json.dumps({"agent": "emitter",
                                             "input": {"records": records}}).encode())
    assert reply.status == 202, (reply.status, reply.body, runtime.output())
    return str(reply.headers["Location"])


def _get(runtime: Runtime, path: str) -> Any:
    reply = runtime.request(path, token=TOKEN)
    assert reply.status == 200, (reply.status, reply.body, runtime.output())
    return reply.json()


def _caught_up(runtime: Runtime) -> dict[str, Any] | None:
    view = _get(runtime, f"/v1/spaces/{SPACE}/maintenance")
    subscribers = {item["name"]: item for item in view["subscribers"]}
    # Seven emitted records and the three submissions' settlement records.
    done = all(item["state"] == "caught-up" and item["cursor"] == item["log_end"] == 10
               for item in subscribers.values())
    return subscribers if done and len(subscribers) == 2 else None


def test_records_reach_each_subscriber_in_order_on_the_live_alarm(
    start_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    runtime = start_runtime(tmp_path / "state")
    try:
        runtime.warm()
        locations = [_post(runtime, "a", 3), _post(runtime, "b", 2), _post(runtime, "a", 2)]
        subscribers = wait_for(lambda: _caught_up(runtime), timeout=TIMEOUT_S,
                               what="both subscribers to reach the log's end")
        for location in locations:
            assert _get(runtime, location)["state"] == "settled"
        delivered = _get(runtime, f"/_delivered/{SPACE}")
    finally:
        runtime.stop()
    assert subscribers["audit"]["required"] is True
    assert subscribers["mirror"]["failures"] == subscribers["audit"]["failures"] == 0
    assert all(len(batch) <= 2 for batch in delivered["mirror"])
    for name in ("mirror", "audit"):
        per_thread: dict[str, list[int]] = {}
        for batch in delivered[name]:
            for thread, seq in batch:
                per_thread.setdefault(thread, []).append(seq)
        # Each submission's records, then its settlement record (a's at seq 4 and 7, b's 3).
        assert per_thread == {"a": [1, 2, 3, 4, 5, 6, 7], "b": [1, 2, 3]}, (name, delivered)
