"""The event stream through the real Worker and object, over HTTP, streamed end to end.

The object's alarm runs each admitted submission promptly; the probe's test-only ``/_drive/``
route runs a Thread's head on request too, so a test need not wait for the alarm. Which of the
two settles a run is a race, so the tests wait for what a run produces (its record, its
settlement), never for who produced it. Every wait is bounded by an HTTP read timeout or a
polled deadline.
"""

from __future__ import annotations

import json
import statistics
import time
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
    reply = client.get(f"/_drive/{SPACE}/{thread}")
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _settled(client: httpx.Client, thread: str, submission_id: str) -> None:
    """Drive the Thread, then wait until the submission is settled (by the drive or the alarm)."""
    _drive(client, thread)

    def settled() -> bool:
        reply = client.get(_thread(thread) + f"/submissions/{submission_id}")
        return bool(reply.json()["state"] == "settled")

    wait_for(settled, timeout=READ_TIMEOUT_S, what=f"{submission_id} to settle")


def _about(event: ServerSentEvent, submission_id: str) -> bool:
    data = json.loads(event.data)
    if event.event == "record":
        return bool(data["submission_id"] == submission_id)
    return bool(data["id"] == submission_id)


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
        first_run = _submit(client, "s1", "one")
        _settled(client, "s1", first_run["id"])
        headers = {"accept": "text/event-stream"}
        with connect_sse(client, "GET", _thread("s1") + "/events", headers=headers) as source:
            assert source.response.headers["content-type"] == "text/event-stream"
            events = source.iter_sse()
            [first] = _records(events, 1)
            assert first.id == "1"
            assert json.loads(first.data)["body"] == {"role": "assistant", "text": "one"}
            # Live: the new run's record arrives (id 2); its state changes, sent meanwhile,
            # carry no id (Last-Event-ID stays at the last record).
            second = _submit(client, "s1", "two")
            _drive(client, "s1")
            states = []
            for event in events:
                if event.event == "record":
                    live = event
                    break
                states.append(event)
            assert live.id == "2" and json.loads(live.data)["body"]["text"] == "two"
            assert all(e.event == "submission" and e.id == "1" for e in states)
            assert {json.loads(e.data)["id"] for e in states} <= {second["id"]}
        # Disconnected; more records are appended meanwhile.
        for text in ("three", "four"):
            run = _submit(client, "s1", text)
        _settled(client, "s1", run["id"])
        resumed = {"accept": "text/event-stream", "last-event-id": "2"}
        with connect_sse(client, "GET", _thread("s1") + "/events", headers=resumed) as source:
            rest = _records(source.iter_sse(), 2)
        assert [e.id for e in rest] == ["3", "4"]
        assert [json.loads(e.data)["body"]["text"] for e in rest] == ["three", "four"]
        # The object lets go of the streams once their clients are gone: the runtime notices a
        # departed client when it next writes, at the latest at the heartbeat (1 s here).
        wait_for(lambda: _drive(client, "s1")["subscribers"] == 0, timeout=10,
                 what="the closed streams' subscribers to be freed")
        bad = client.get(_thread("s1") + "/events", headers={"last-event-id": "x"})
        assert bad.status_code == 400
        assert bad.json()["type"] == "urn:threadline:problem:invalid-header"


def test_admission_to_first_event_latency(workerd: Runtime) -> None:
    """Warm latency from a committed admission to its event at the client, p50 and p99."""
    samples: list[float] = []
    posts: list[float] = []
    records: list[float] = []
    with _client(workerd) as client:
        warm = _submit(client, "lat", "warm-up")
        _settled(client, "lat", warm["id"])
        with connect_sse(client, "GET", _thread("lat") + "/events") as source:
            events = source.iter_sse()
            _records(events, 1)
            for index in range(40):
                started = time.perf_counter()
                sent = _submit(client, "lat", f"m{index}")
                posts.append((time.perf_counter() - started) * 1000)
                # The first event about this run (its admission, or its record when the alarm
                # ran it before the stream woke); events about the previous run are skipped.
                first = next(event for event in events if _about(event, sent["id"]))
                samples.append((time.perf_counter() - started) * 1000)
                if first.event == "record":
                    continue
                driving = time.perf_counter()
                _drive(client, "lat")
                for event in events:
                    if event.event == "record" and _about(event, sent["id"]):
                        records.append((time.perf_counter() - driving) * 1000)
                        break
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(f"admission -> first SSE event: p50 {p50:.1f} ms, p99 {p99:.1f} ms (n={len(samples)});"
          f" the POST alone: p50 {statistics.median(posts):.1f} ms; drive request -> record"
          f" event: p50 {statistics.median(records) if records else float('nan'):.1f} ms"
          f" (n={len(records)})")
    assert p50 < 1000


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
