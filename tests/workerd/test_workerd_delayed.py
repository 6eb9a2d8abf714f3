"""Delayed submissions over real HTTP in real workerd: a submission admitted with ``not_before``
waits as ``scheduled`` (input arriving meanwhile runs at once), the runtime is killed before it
falls due and started again from its files, and the object's alarm alone admits it at its time
and runs it: after its time and not before, settled once, behind the input that came first."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from test_workerd_maintenance import kill_workerd
from workerd_runtime import TOKEN, Runtime, wait_for

SETTLE_TIMEOUT_S = 30.0
#: How far ahead the delayed submission falls due: room for the kill and restart before it.
DELAY_MS = 25_000


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


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_delayed_submission_settles_after_its_time_and_not_before_across_a_restart(
    start_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    space, thread = "delayed", "t"
    first = start_runtime(tmp_path)
    try:
        first.warm()
        assert _get(first, f"/_settlements/{space}") == {}  # installs the log
        due = _now_ms() + DELAY_MS
        due_text = datetime.fromtimestamp(due / 1000, UTC).isoformat(timespec="milliseconds")
        reply = _post(first, _thread(space, thread) + "/submissions",
                      {"agent": "echo", "input": {"text": "later"}, "not_before": due_text,
                       "idempotency_key": "later"})
        assert reply.status == 202
        later = reply.json()
        assert (later["state"], later["seq"], later["not_before"]) == ("scheduled", None, due)
        location = reply.headers["Location"]
        now = _post(first, _thread(space, thread) + "/submissions",
                    {"agent": "echo", "input": {"text": "now"}}).headers["Location"]
        ran = _until(first, now, lambda d: d["state"] == "settled", "the input admitted meanwhile")
        assert ran["seq"] == 1
        waiting = _get(first, location)
        assert (waiting["state"], waiting["seq"]) == ("scheduled", None)
        assert [item["id"] for item in _get(first, _thread(space, thread))["scheduled"]] == [
            later["id"]]
        kill_workerd(first)
        assert _now_ms() < due, "the runtime was killed after the due time: raise DELAY_MS"
    finally:
        first.stop()

    second = start_runtime(tmp_path)
    try:
        second.warm()
        restarted = _now_ms()
        seen_scheduled = _get(second, location)["state"] == "scheduled" and _now_ms() < due
        done = _until(second, location, lambda d: d["state"] == "settled",
                      "the delayed submission to settle")
        # A replay of its key still answers with it.
        replay = _post(second, _thread(space, thread) + "/submissions",
                       {"agent": "echo", "input": {"text": "later"}, "idempotency_key": "later"})
        log = _get(second, f"/_settlements/{space}")
    finally:
        second.stop()
    assert seen_scheduled, ("the restarted object should still hold it scheduled before its"
                            f" time; it was {due - restarted} ms ahead at the restart")
    assert (done["outcome"], done["result"], done["seq"]) == ("completed", {"text": "later"}, 2)
    started = [step["started_at"] for step in done["journal"]["entries"]]
    assert started and min(started) >= due, (started, due)
    assert done["settled_at"] >= due
    assert replay.status == 200 and replay.json()["id"] == later["id"]
    assert len(log.get(later["id"], [])) == 1, log
