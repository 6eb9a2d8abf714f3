"""The event stream through the real Worker and object, over HTTP, streamed end to end.

Runs are pushed through the probe's test-only ``/_drive/`` route (the app's own object runs
the Thread's head Attempts on request) as well as by the object's alarm, whichever comes
first; test_workerd_flows.py follows runs the alarm alone settles.
Every wait is bounded by an HTTP read timeout or a polled deadline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, connect_sse
from workerd_runtime import TOKEN, Runtime, wait_for

from threadline.client import Client

SPACE = "sse-tests"
READ_TIMEOUT_S = 10.0


def _thread(name: str) -> str:
    return f"/v1/spaces/{SPACE}/threads/{name}"


def _client(runtime: Runtime) -> httpx.Client:
    return httpx.Client(
        base_url=runtime.url, headers={"authorization": f"Bearer {TOKEN}"},
        timeout=httpx.Timeout(READ_TIMEOUT_S),
    )


def _submit(client: httpx.Client, thread: str, text: str) -> dict[str, Any]:
    reply = client.post(_thread(thread) + "/submissions",
                        json={"agent": "echo", "input": {"text": text}})
    assert reply.status_code == 202, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _drive(client: httpx.Client, thread: str) -> dict[str, Any]:
    """Run the Thread's work now, then wait (bounded) until nothing is open: the object's
    alarm runs the same work and may have taken some of it first, so how many runs this
    request settled itself varies."""
    reply = client.get(f"/_drive/{SPACE}/{thread}")
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    wait_for(lambda: client.get(_thread(thread)).json()["open"] == [], timeout=READ_TIMEOUT_S,
             what=f"thread {thread} to have no open submission")
    return body


def _records(events: Iterator[ServerSentEvent], count: int) -> list[ServerSentEvent]:
    found = []
    for event in events:
        if event.event == "record":
            found.append(event)
            if len(found) == count:
                return found
    raise AssertionError("the stream ended early")


def test_stream_delivers_history_live_records_and_resumes(workerd: Runtime) -> None:
    with _client(workerd) as client:
        _submit(client, "s1", "one")
        _drive(client, "s1")
        headers = {"accept": "text/event-stream"}
        with connect_sse(client, "GET", _thread("s1") + "/events", headers=headers) as source:
            assert source.response.headers["content-type"] == "text/event-stream"
            events = source.iter_sse()
            first, first_settled = _records(events, 2)
            assert first.id == "1"
            assert json.loads(first.data)["body"] == {"role": "assistant", "text": "one"}
            assert first_settled.id == "2"
            assert json.loads(first_settled.data)["kind"] == "submission.settled"
            # Live: a new submission is announced (no id), then its record arrives (id 3).
            second = _submit(client, "s1", "two")
            announced = next(events)
            assert announced.event == "submission" and announced.id == "2"
            assert json.loads(announced.data)["id"] == second["id"]
            _drive(client, "s1")
            [live] = _records(events, 1)
            assert live.id == "3" and json.loads(live.data)["body"]["text"] == "two"
        # Disconnected after seq 3; more is appended meanwhile: the second's settlement, and
        # two more submissions' records and settlements.
        for text in ("three", "four"):
            _submit(client, "s1", text)
        _drive(client, "s1")
        resumed = {"accept": "text/event-stream", "last-event-id": "3"}
        with connect_sse(client, "GET", _thread("s1") + "/events", headers=resumed) as source:
            rest = _records(source.iter_sse(), 5)
        assert [e.id for e in rest] == ["4", "5", "6", "7", "8"]
        assert [json.loads(e.data)["kind"] for e in rest] == [
            "submission.settled", "record", "submission.settled", "record", "submission.settled"]
        assert [json.loads(e.data)["body"]["text"] for e in rest[1::2]] == ["three", "four"]
        bad = client.get(_thread("s1") + "/events", headers={"last-event-id": "x"})
        assert bad.status_code == 400
        assert bad.json()["type"] == "urn:threadline:problem:invalid-header"


def test_closed_streams_free_their_subscribers(workerd: Runtime) -> None:
    """The object lets go of a stream once its client is gone: the runtime notices a departed
    client when it next writes, at the latest at the heartbeat (1 s in the probe), or else the
    stall bound closes the stream (3 s in the probe). Counts every stream of the space, so the
    first test's closed streams count too."""
    with _client(workerd) as client:
        _submit(client, "freed", "one")
        headers = {"accept": "text/event-stream"}
        for _ in range(2):
            with connect_sse(client, "GET", _thread("freed") + "/events",
                             headers=headers) as source:
                _records(source.iter_sse(), 1)
        wait_for(lambda: _drive(client, "freed")["subscribers"] == 0, timeout=30,
                 what="the closed streams' subscribers to be freed")


def test_the_client_reads_the_stream(workerd: Runtime) -> None:
    with _client(workerd) as http, Client(workerd.url, TOKEN, timeout=READ_TIMEOUT_S) as client:
        first = client.submit(SPACE, "c1", {"text": "from the client"}, agent="echo")
        _drive(http, "c1")
        events = client.events(SPACE, "c1")
        try:
            seen = [next(events)]
            while seen[-1].kind != "record":
                seen.append(next(events))
            assert seen[-1].seq == 1
            assert seen[-1].record().body == {"role": "assistant", "text": "from the client"}
            assert seen[-1].record().submission_id == first.id
        finally:
            events.close()  # type: ignore[attr-defined]


def test_a_stream_opened_before_the_first_submission_writes_nothing_then_follows_it(
    workerd: Runtime,
) -> None:
    """Subscribe, then submit: the stream opens on a Thread nothing was admitted to, opening
    it writes no row (workerd's billed count, read by two drives around it), and the first
    submission's announcement and record arrive on it. Its own space, so the counts are its
    own."""
    space = "sse-fresh"
    thread = f"/v1/spaces/{space}/threads/first"
    with _client(workerd) as client, \
            Client(workerd.url, TOKEN, timeout=READ_TIMEOUT_S) as typed:
        # The first request also migrates the new object; what it wrote is counted before.
        summary = client.get(thread)
        assert summary.status_code == 200, summary.text
        assert summary.json() == {
            "id": "first", "submissions": 0, "open_submissions": 0, "history_seq": 0,
            "created_at": None, "updated_at": None, "open": [], "scheduled": [],
        }
        assert client.get(thread + "/history").json() == {
            "thread_id": "first", "records": [], "next": None, "first_kept": None}
        before = _drive_space(client, space, "first")
        headers = {"accept": "text/event-stream"}
        with connect_sse(client, "GET", thread + "/events", headers=headers) as source:
            assert source.response.status_code == 200
            assert source.response.headers["content-type"] == "text/event-stream"
            events = source.iter_sse()
            wait_for(lambda: _subscribers(client, space, "first") == 1,
                     timeout=READ_TIMEOUT_S, what="the stream to be open")
            opened = _drive_space(client, space, "first")
            assert opened["rows_written"] == before["rows_written"]
            assert client.get(f"/v1/spaces/{space}/threads").json()["threads"] == []
            # The typed client opens on the same empty Thread (no NotFound) in its own thread.
            followed: dict[str, Any] = {}
            follower = threading.Thread(target=lambda: followed.update(
                record=_first_record(typed, space, "first")))
            follower.start()
            wait_for(lambda: _subscribers(client, space, "first") == 2,
                     timeout=READ_TIMEOUT_S, what="the client's stream to be open")
            reply = client.post(thread + "/submissions",
                                json={"agent": "echo", "input": {"text": "first"}})
            assert reply.status_code == 202, reply.text
            submission = reply.json()
            client.get(f"/_drive/{space}/first")
            seen = []
            for event in events:
                seen.append(event)
                if event.event == "record":
                    break
            record = seen[-1]
            assert record.id == "1"
            data = json.loads(record.data)
            assert data["submission_id"] == submission["id"]
            assert data["body"] == {"role": "assistant", "text": "first"}
            # Announced before its record, unless its run finished before the stream woke.
            announced = [json.loads(e.data)["id"] for e in seen if e.event == "submission"]
            assert announced in ([], [submission["id"]])
            follower.join(timeout=READ_TIMEOUT_S * 2)
            assert not follower.is_alive()
        assert followed["record"] == (1, submission["id"], {"role": "assistant", "text": "first"})


def _first_record(client: Client, space: str, thread: str) -> tuple[int | None, str | None, Any]:
    events = client.events(space, thread, max_reconnects=0)
    try:
        for event in events:
            if event.kind == "record":
                record = event.record()
                return event.seq, record.submission_id, record.body
        raise AssertionError("the stream ended early")
    finally:
        events.close()  # type: ignore[attr-defined]


def _drive_space(client: httpx.Client, space: str, thread: str) -> dict[str, Any]:
    reply = client.get(f"/_drive/{space}/{thread}")
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def test_a_stalled_stream_is_closed(workerd: Runtime) -> None:
    """A consumer that stops reading without the platform ever noticing (the chunk in flight
    is never taken, no cancel comes) is closed once a chunk has waited three heartbeats
    (3 s in the probe): its subscriber is freed while the consumer still holds the stream."""
    space = "sse-stall"
    with _client(workerd) as client, _client(workerd) as holder_client:
        reply = client.post(f"/v1/spaces/{space}/threads/held/submissions",
                            json={"agent": "echo", "input": {"text": "one"}})
        assert reply.status_code == 202, reply.text
        held: dict[str, Any] = {}
        holder = threading.Thread(target=lambda: held.update(
            reply=holder_client.get(f"/_hold/{space}/held?seconds=16", timeout=40)))
        holder.start()
        try:
            wait_for(lambda: _subscribers(client, space, "held") == 1, timeout=READ_TIMEOUT_S,
                     what="the held stream to be open")
            # Well before the holder lets go of the stream (16 s).
            wait_for(lambda: _subscribers(client, space, "held") == 0, timeout=12,
                     what="the stalled stream's subscriber to be freed")
        finally:
            holder.join(timeout=40)
        assert held["reply"].status_code == 200, held["reply"].text
        assert held["reply"].json() == {"status": 200, "first": True}


def _subscribers(client: httpx.Client, space: str, thread: str) -> int:
    reply = client.get(f"/_drive/{space}/{thread}")
    assert reply.status_code == 200, reply.text
    count: int = reply.json()["subscribers"]
    return count
