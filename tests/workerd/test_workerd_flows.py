"""The thread API's flows over real HTTP, with the object's alarm as the only engine.

Every request goes through the app's Worker (bearer token, ids, sizes) to the object; no
request runs an agent: after admission, approval, abort or resolution the tests only poll
(bounded) until the alarm has done the work. ``src/entry.py``'s agents serve the space names
used here, except the ``probe-*`` spaces: the test bundle serves those with
``ProbeThreadObject`` (the deployed object class with test-only agents and a 2 s lease), whose
``probe-uncertain`` agent can lose an uncertain step in flight, which the example agents cannot.
The settlement log (``/_settlements/``, a trigger on the submissions table) records every
committed transition into ``settled``, so a submission settled twice would show.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, connect_sse
from test_workerd_maintenance import kill_workerd
from workerd_runtime import TOKEN, Runtime, wait_for

SETTLE_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 10.0


def _thread(space: str, thread: str) -> str:
    return f"/v1/spaces/{space}/threads/{thread}"


def _post(runtime: Runtime, path: str, payload: Any) -> Any:
    reply = runtime.request(path, method="POST", token=TOKEN, body=json.dumps(payload).encode())
    return reply


def _submit(runtime: Runtime, space: str, thread: str, agent: str, input: Any) -> str:
    reply = _post(runtime, _thread(space, thread) + "/submissions",
                  {"agent": agent, "input": input})
    assert reply.status == 202, (reply.status, reply.body)
    location: str = reply.headers["Location"]
    return location


def _get(runtime: Runtime, path: str) -> Any:
    reply = runtime.request(path, token=TOKEN)
    assert reply.status == 200, (reply.status, reply.body, runtime.output())
    return reply.json()


def _until(runtime: Runtime, location: str, check: Callable[[Any], bool], what: str) -> Any:
    def poll() -> Any:
        detail = _get(runtime, location)
        return detail if check(detail) else None

    return wait_for(poll, timeout=SETTLE_TIMEOUT_S, what=what)


def _settled(runtime: Runtime, location: str) -> Any:
    return _until(runtime, location, lambda d: d["state"] == "settled", f"{location} to settle")


def _history(runtime: Runtime, space: str, thread: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = _get(runtime, _thread(space, thread) + "/history")["records"]
    return records


def _open_wait(detail: Any, kind: str) -> Any:
    return next((w for w in detail["waits"] if w["kind"] == kind and w["state"] == "open"), None)


def test_confirm_is_approved_or_refused_over_http(workerd: Runtime) -> None:
    space, thread = "flows", "confirm"
    approved = _submit(workerd, space, thread, "confirm", {"text": "ship it"})
    refused = _submit(workerd, space, thread, "confirm", {"text": "drop it"})
    asking = _until(workerd, approved, lambda d: _open_wait(d, "approval") is not None,
                    "the first confirm to ask for its approval")
    assert asking["state"] == "suspended"
    assert _open_wait(asking, "approval")["payload"] == {"text": "ship it"}
    # FIFO: the second waits behind the suspended head and has not started.
    assert _get(workerd, refused)["state"] in ("queued", "ready")
    missing = _post(workerd, approved + "/approvals/other", {"approved": True})
    assert missing.status == 404

    decided = _post(workerd, approved + "/approvals/confirm", {"approved": True})
    assert decided.status == 200 and decided.json()["approved"] is True
    done = _settled(workerd, approved)
    assert (done["outcome"], done["result"]) == ("completed", {"approved": True})
    changed_mind = _post(workerd, approved + "/approvals/confirm", {"approved": False})
    assert changed_mind.status == 409

    _until(workerd, refused, lambda d: _open_wait(d, "approval") is not None,
           "the second confirm to ask for its approval")
    assert _post(workerd, refused + "/approvals/confirm", {"approved": False}).status == 200
    done = _settled(workerd, refused)
    assert (done["outcome"], done["result"]) == ("completed", {"approved": False})

    records = _history(workerd, space, thread)
    first_id = approved.rsplit("/", 1)[1]
    said = [(r["submission_id"], r["body"]) for r in records if r["kind"] == "record"]
    # Only the approved one spoke.
    assert said == [(first_id, {"role": "assistant", "text": "ship it"})]


def test_abort_a_queued_and_a_suspended_submission(workerd: Runtime) -> None:
    space, thread = "flows", "abort"
    head = _submit(workerd, space, thread, "confirm", {"text": "never approved"})
    queued = _submit(workerd, space, thread, "echo", {"text": "never said"})
    _until(workerd, head, lambda d: _open_wait(d, "approval") is not None,
           "the head to ask for its approval")
    reply = _post(workerd, queued + "/abort", {"reason": "not needed"})
    assert reply.status == 200 and reply.json()["abort"]["state"] in ("accepted", "applied")
    done = _settled(workerd, queued)
    assert done["outcome"] == "aborted" and done["journal"]["steps"] == 0
    assert _get(workerd, head)["state"] == "suspended"  # the abort touched only its target

    assert _post(workerd, head + "/abort", {}).status == 200
    done = _settled(workerd, head)
    assert done["outcome"] == "aborted"
    assert all(w["state"] != "open" for w in done["waits"])
    again = _post(workerd, head + "/abort", {})
    assert again.status == 200 and again.json()["outcome"] == "aborted"
    assert not [r for r in _history(workerd, space, thread) if r["kind"] == "record"]


def test_the_stream_follows_an_alarm_run_and_resumes(workerd: Runtime) -> None:
    """Every record of echo runs arrives in order, from the alarm's work alone; a client that
    reconnects with Last-Event-ID gets exactly the records after it. (An echo run appends one
    canonical record, its reply, then its ``submission.settled`` record.)"""
    space, thread = "flows", "stream"
    path = _thread(space, thread) + "/events"
    headers = {"authorization": f"Bearer {TOKEN}", "accept": "text/event-stream"}

    def take(events: Iterator[ServerSentEvent], count: int) -> list[Any]:
        """The next ``count`` record events; bounded by a deadline, which the stream's
        heartbeat (every second here) lets the loop check even when nothing else comes."""
        found: list[Any] = []
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        for event in events:
            if event.event == "record":
                data = json.loads(event.data)
                found.append((event.id, data["submission_id"], data["body"]))
                if len(found) == count:
                    return found
            assert time.monotonic() < deadline, f"only {found} after {SETTLE_TIMEOUT_S} s"
        raise AssertionError("the stream ended early")

    def sub_id(location: str) -> str:
        return location.rsplit("/", 1)[1]

    with httpx.Client(base_url=workerd.url, headers=headers,
                      timeout=httpx.Timeout(READ_TIMEOUT_S)) as client:
        # The Thread exists once it has a submission: open the stream after the first.
        first = _submit(workerd, space, thread, "echo", {"text": "one"})
        with connect_sse(client, "GET", path) as source:
            events = source.iter_sse()
            second = _submit(workerd, space, thread, "echo", {"text": "two"})
            live = take(events, 4)
        assert live == [
            ("1", sub_id(first), {"role": "assistant", "text": "one"}),
            ("2", sub_id(first), _settlement(first, "one")),
            ("3", sub_id(second), {"role": "assistant", "text": "two"}),
            ("4", sub_id(second), _settlement(second, "two")),
        ]
        # Disconnected while two more runs complete.
        later = [_submit(workerd, space, thread, "echo", {"text": t}) for t in ("3", "4")]
        for location in later:
            _settled(workerd, location)
        with connect_sse(client, "GET", path, headers={"last-event-id": "4"}) as source:
            events = source.iter_sse()
            fifth = _submit(workerd, space, thread, "echo", {"text": "5"})
            rest = take(events, 6)
    for location in (first, second, fifth):
        assert _settled(workerd, location)["outcome"] == "completed"
    expected = []
    runs = [(later[0], "3"), (later[1], "4"), (fifth, "5")]
    for seq, (location, text) in zip((5, 7, 9), runs, strict=True):
        expected += [(str(seq), sub_id(location), {"role": "assistant", "text": text}),
                     (str(seq + 1), sub_id(location), _settlement(location, text))]
    assert rest == expected


def _settlement(location: str, text: str) -> dict[str, Any]:
    """The body of an echo run's ``submission.settled`` record."""
    submission = location.rsplit("/", 1)[1]
    return {"submission_id": submission, "outcome": "completed", "result": {"text": text}}


def test_an_unknown_outcome_is_resolved_over_http(
    start_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    """Two uncertain steps lost with the runtime become Unknown Outcomes; one is resolved by
    accepting a result (the step never runs again), the other by a retry (it runs again)."""
    space = "probe-lost"
    first = start_runtime(tmp_path, PROBE_RUN="first")
    try:
        first.warm()
        assert first.request(f"/_threads/{space}/install").status == 200
        accept = _submit(first, space, "u1", "probe-uncertain", "card-1")
        retry = _submit(first, space, "u2", "probe-uncertain", "card-2")
        for location in (accept, retry):
            _until(first, location, lambda d: d["journal"]["in_flight"] == 1,
                   f"{location} to start its uncertain step")
        kill_workerd(first)
    finally:
        first.stop()

    second = start_runtime(tmp_path, PROBE_RUN="second")
    try:
        second.warm()
        for location in (accept, retry):
            lost = _until(second, location, lambda d: d["state"] == "unknown",
                          f"{location} to become an Unknown Outcome")
            assert _open_wait(lost, "unknown") is not None
        invalid = _post(second, accept + "/resolve", {"action": "accept"})
        assert invalid.status == 422 and invalid.json()["field"] == "result"
        reply = _post(second, accept + "/resolve",
                      {"action": "accept", "result": {"charged": "by hand"}})
        assert reply.status == 200, reply.body
        assert _post(second, retry + "/resolve", {"action": "retry"}).status == 200
        accepted = _settled(second, accept)
        retried = _settled(second, retry)
        again = _post(second, accept + "/resolve", {"action": "retry"})
        assert again.status == 409
        statuses = {
            location: _get_probe_status(second, space, location) for location in (accept, retry)
        }
    finally:
        second.stop()
    assert accepted["outcome"] == "completed"
    assert accepted["result"] == {"charged": {"charged": "by hand"}, "attempt": 2}
    assert retried["outcome"] == "completed"
    assert retried["result"] == {"charged": {"charged": "card-2"}, "attempt": 2}
    # The accepted step never ran again; the retried one ran once more; each settled once.
    assert statuses[accept]["effects"] == ["charge:1"]
    assert statuses[retry]["effects"] == ["charge:1", "charge:2"]
    assert all(len(status["settlements"]) == 1 for status in statuses.values())


def _get_probe_status(runtime: Runtime, space: str, location: str) -> Any:
    sub_id = location.rsplit("/", 1)[1]
    reply = runtime.request(f"/_threads/{space}/status?id={sub_id}")
    assert reply.status == 200, (reply.status, reply.body)
    return reply.json()


def test_a_runtime_restarted_mid_flow_settles_each_submission_once(
    start_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    """Submissions admitted over HTTP, the runtime killed while some are queued or running
    (one Thread's head is waiting for an approval): after the restart each one settles, once,
    and each Thread's log holds each run's records once, in submission order, each followed by
    its settlement record."""
    space = "restart"
    first = start_runtime(tmp_path)
    try:
        first.warm()
        assert _get(first, f"/_settlements/{space}") == {}  # installs the log
        gate = _submit(first, space, "held", "confirm", {"text": "after the restart"})
        submitted: dict[str, list[str]] = {"held": [gate], "a": [], "b": []}
        for index in range(6):
            for thread in ("a", "b", "held"):
                submitted[thread].append(
                    _submit(first, space, thread, "echo", {"text": f"{thread}{index}"}))
        before = {thread: _get(first, _thread(space, thread))["open"] for thread in submitted}
        kill_workerd(first)
    finally:
        first.stop()
    assert before["held"], "the held Thread had open work at the kill"

    second = start_runtime(tmp_path)
    try:
        second.warm()
        _until(second, gate, lambda d: _open_wait(d, "approval") is not None,
               "the held head to ask for its approval again")
        assert _post(second, gate + "/approvals/confirm", {"approved": True}).status == 200
        details = {location: _settled(second, location)
                   for locations in submitted.values() for location in locations}
        log = _get(second, f"/_settlements/{space}")
        histories = {thread: _history(second, space, thread) for thread in submitted}
    finally:
        second.stop()
    assert all(d["outcome"] == "completed" for d in details.values())
    ids = {location: location.rsplit("/", 1)[1] for location in details}
    assert {ids[location]: len(log.get(ids[location], [])) for location in details} == {
        ids[location]: 1 for location in details}
    for thread, locations in submitted.items():
        records = histories[thread]
        assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
        expected: list[tuple[str, str]] = []
        for location in locations:
            # The runtime's records framing each run's own, each once: the gate's approval
            # request (however many times its Attempt asked) and its decision, the settlement.
            if location == gate:
                expected.append((ids[location], "approval.requested"))
                expected.append((ids[location], "approval.decided"))
            expected += [(ids[location], "record"), (ids[location], "submission.settled")]
        assert [(r["submission_id"], r["kind"]) for r in records] == expected
