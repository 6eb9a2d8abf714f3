"""A long pass gives the object back between Attempts, in real workerd.

First the platform fact the pause relies on: while an object runs a long synchronous loop,
workerd delivers another request to it only when the loop awaits a JavaScript timer
(``setTimeout(0)``); an ``asyncio.sleep`` (0 or a millisecond) and a resolved promise stay
inside the running event. Then the behaviour: an admission POSTed while a long pass runs is
answered before that pass ends, and the pass still settles everything once, in order.

Every wait is a bounded poll.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from workerd_runtime import TOKEN, Runtime, wait_for

#: A spin of this many rounds of ``WORK`` synchronous statements lasts a few seconds.
ROUNDS = 30
WORK = 300


def _spin_and_peek(runtime: Runtime, obj: str, kind: str) -> list[dict[str, Any]]:
    """Run a spin pausing with ``kind`` between rounds; peek at the object meanwhile, as
    fast as it answers. Every peek's answer, in order."""
    runtime.probe(obj, "peek")
    done: dict[str, Any] = {}

    def spin() -> None:
        done["spin"] = runtime.probe(obj, "spin", kind=kind, rounds=str(ROUNDS), work=str(WORK))

    thread = threading.Thread(target=spin)
    thread.start()
    peeks: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    try:
        while thread.is_alive() and time.monotonic() < deadline:
            peeks.append(runtime.probe(obj, "peek"))
            time.sleep(0.02)
    finally:
        thread.join(timeout=120)
    assert done["spin"] == {"rounds": ROUNDS}
    return peeks


@pytest.mark.parametrize("kind", ["sleep0", "sleep1ms", "microtask"])
def test_a_busy_object_is_not_given_up_by_asyncio_sleep_or_a_resolved_promise(
    workerd: Runtime, kind: str
) -> None:
    peeks = _spin_and_peek(workerd, f"spin-{kind}", kind)
    # No request was served while the spin ran: each peek came before it or after it.
    assert not [peek for peek in peeks if peek["spinning"]], peeks


def test_a_busy_object_is_given_up_by_a_javascript_timer(workerd: Runtime) -> None:
    peeks = _spin_and_peek(workerd, "spin-settimeout0", "settimeout0")
    during = [peek for peek in peeks if peek["spinning"]]
    # Requests were served between the spin's rounds, while it ran.
    assert during, peeks


def _threads(runtime: Runtime, obj: str, op: str, **args: Any) -> Any:
    query = urlencode(args)
    reply = runtime.request(f"/_threads/{obj}/{op}" + (f"?{query}" if query else ""),
                            timeout=120)
    assert reply.status == 200, (reply.status, reply.body, runtime.output())
    return reply.json()


def test_an_admission_during_a_long_pass_is_answered_before_the_pass_ends(
    workerd: Runtime,
) -> None:
    space = "probe-yield"
    _threads(workerd, space, "install")
    # About 40 Attempts of ~100 synchronous statements each: a pass of seconds with no I/O.
    seeded = _threads(workerd, space, "seed", n=40, agent="probe-busy", prefix="busy",
                      input=json.dumps({"work": 100}))["ids"]

    def running() -> Any:
        seen = _threads(workerd, space, "passes")
        return seen if seen["running"] is not None else None

    # Answered while the pass runs: only possible if the pass gives the object back.
    during = wait_for(running, timeout=60, interval=0.02, what="a poll answered mid-pass")
    number = during["running"]
    reply = workerd.request(
        f"/v1/spaces/{space}/threads/late/submissions", method="POST", token=TOKEN,
        body=json.dumps({"agent": "probe-echo", "input": "late"}).encode(),
        headers={"content-type": "application/json"}, timeout=120)
    assert reply.status == 202, (reply.status, reply.body)
    late = reply.json()["id"]

    def settled(submission_id: str) -> bool:
        status = _threads(workerd, space, "status", id=submission_id)
        return bool(status["state"] == "settled")

    wait_for(lambda: all(settled(i) for i in [*seeded, late]), timeout=120, interval=0.2,
             what="every submission to settle")
    events = [tuple(event) for event in _threads(workerd, space, "passes")["events"]]
    # The admission was answered inside that pass, before it ended.
    assert ("admitted", number) in events, events
    assert events.index(("admitted", number)) < events.index(("pass-end", number)), events
    for submission_id in [*seeded, late]:
        status = _threads(workerd, space, "status", id=submission_id)
        # Exactly one settlement each, in one Attempt.
        assert status["outcome"] == "completed", status
        assert status["settlements"] and len(status["settlements"]) == 1, status
        assert status["attempts"] == 1, status
