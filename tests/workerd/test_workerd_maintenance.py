"""The alarm alone runs a submission to settlement in real workerd, across a killed runtime.

The submission is admitted through a test-only route of ``ProbeThreadObject`` (the deployed
``ThreadObjectBase`` with test-only agents); after that the tests only read its status: no
request runs anything, the object's alarm does. The agents write an effect row per run of
their step, and a trigger logs every committed transition into ``settled``.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workerd_runtime import Runtime, wait_for

SETTLE_TIMEOUT_S = 30.0


def kill_workerd(runtime: Runtime) -> None:
    """SIGKILL the workerd process under the runtime's node driver, then the driver: no
    handler finishes and nothing is flushed. Without ``/proc`` (not Linux) it only stops."""
    process = runtime.process
    assert process is not None
    proc = Path("/proc")
    if not proc.is_dir():
        runtime.stop()
        return
    children = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == process.pid:  # its parent is the driver
            children.append(int(stat.parent.name))
    assert children, "no workerd process under the driver"
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    process.kill()
    process.wait(timeout=10)


def threads(runtime: Runtime, obj: str, op: str, **args: str) -> Any:
    query = "&".join(f"{key}={value}" for key, value in args.items())
    reply = runtime.request(f"/_threads/{obj}/{op}?{query}")
    assert reply.status == 200, (reply.status, reply.body, runtime.output())
    return reply.json()


def settled(runtime: Runtime, obj: str, sub_id: str) -> Any:
    status = threads(runtime, obj, "status", id=sub_id)
    return status if status["state"] == "settled" else None


def test_a_submission_settles_by_the_alarm_alone(workerd: Runtime) -> None:
    admitted = threads(workerd, "alarm-alone", "admit", thread="t1", agent="probe-echo",
                       input=json.dumps(41))
    final = wait_for(lambda: settled(workerd, "alarm-alone", admitted["id"]),
                     timeout=SETTLE_TIMEOUT_S, what="settlement by the alarm")
    assert final["outcome"] == "completed"
    assert final["result"] == {"got": 41}
    assert final["settlements"] == ["running"]  # exactly one transition into settled
    assert final["effects"] == ["echo"]
    # Nothing is left to do: the pass that settled it (or the next one) clears the alarm.
    wait_for(lambda: threads(workerd, "alarm-alone", "status", id=admitted["id"])["alarm"] is None,
             timeout=SETTLE_TIMEOUT_S, what="the alarm to be cleared")


def test_a_runtime_killed_mid_attempt_restarts_and_settles_exactly_once(
    start_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    first = start_runtime(tmp_path, PROBE_RUN="first")
    try:
        first.warm()
        admitted = threads(first, "killed", "admit", thread="t", agent="probe-slow",
                           input=json.dumps("job"))
        # The alarm started the Attempt, whose step now hangs: kill the runtime under it.
        wait_for(lambda: "work:1" in threads(first, "killed", "status", id=admitted["id"])[
            "effects"], timeout=SETTLE_TIMEOUT_S, what="the first Attempt to start its step")
        in_flight = threads(first, "killed", "status", id=admitted["id"])
        kill_workerd(first)
    finally:
        first.stop()
    assert in_flight["state"] == "running"
    assert in_flight["alarm"] is not None  # the lease deadline stands in the slot

    second = start_runtime(tmp_path, PROBE_RUN="second")
    try:
        second.warm()
        final = wait_for(lambda: settled(second, "killed", admitted["id"]),
                         timeout=SETTLE_TIMEOUT_S, what="settlement after the restart")
    finally:
        second.stop()
    assert final["run"] == "second"
    assert final["outcome"] == "completed"
    assert final["result"] == {"done_in_attempt": 2}
    assert final["settlements"] == ["running"]  # settled exactly once
    # The idempotent step ran again in the second Attempt; nothing ran a third time.
    assert final["effects"] == ["work:1", "work:2"]
