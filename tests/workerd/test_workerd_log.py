"""The Thread log through the real Worker and object: settlement records on the SSE stream.

A client that was away while submissions were admitted and settled reconnects with
``Last-Event-ID`` and learns every settlement, once, in order, with no gap in the seqs. Every
wait is bounded by an HTTP read timeout or a polled deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, connect_sse
from workerd_runtime import TOKEN, Runtime, wait_for

SPACE = "log-tests"
READ_TIMEOUT_S = 10.0
SETTLED = "submission.settled"


def _thread(name: str) -> str:
    return f"/v1/spaces/{SPACE}/threads/{name}"


def _client(runtime: Runtime) -> httpx.Client:
    return httpx.Client(
        base_url=runtime.url, headers={"authorization": f"Bearer {TOKEN}"},
        timeout=httpx.Timeout(READ_TIMEOUT_S),
    )


def _submit(client: httpx.Client, thread: str, text: str) -> str:
    reply = client.post(_thread(thread) + "/submissions",
                        json={"agent": "echo", "input": {"text": text}})
    assert reply.status_code == 202, reply.text
    return str(reply.json()["id"])


def _settle(client: httpx.Client, thread: str) -> None:
    """Run the Thread's work now (the object's alarm may take some of it first), then wait,
    bounded, until nothing is open."""
    assert client.get(f"/_drive/{SPACE}/{thread}").status_code == 200
    wait_for(lambda: client.get(_thread(thread)).json()["open"] == [], timeout=READ_TIMEOUT_S,
             what=f"thread {thread} to have no open submission")


def _records(events: Iterator[ServerSentEvent], count: int) -> list[ServerSentEvent]:
    found = []
    for event in events:
        if event.event == "record":
            found.append(event)
            if len(found) == count:
                return found
    raise AssertionError("the stream ended early")


def _data(event: ServerSentEvent) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(event.data)
    return data


def test_a_resumed_stream_carries_every_settlement_missed_once_in_order(
    workerd: Runtime,
) -> None:
    thread = "resumed"
    with _client(workerd) as client:
        first = _submit(client, thread, "before")
        _settle(client, thread)
        headers = {"accept": "text/event-stream"}
        with connect_sse(client, "GET", _thread(thread) + "/events", headers=headers) as source:
            reply, settled = _records(source.iter_sse(), 2)
        assert (reply.id, _data(reply)["kind"]) == ("1", "record")
        assert (settled.id, _data(settled)["kind"]) == ("2", SETTLED)
        assert _data(settled)["record_id"] == f"{first}:settled"
        assert _data(settled)["body"] == {"submission_id": first, "outcome": "completed",
                                          "result": {"text": "before"}}

        # Disconnected: four more are admitted and settled before the client comes back.
        texts = ["one", "two", "three", "four"]
        missed = [_submit(client, thread, text) for text in texts]
        _settle(client, thread)

        resumed = {"accept": "text/event-stream", "last-event-id": settled.id}
        with connect_sse(client, "GET", _thread(thread) + "/events", headers=resumed) as source:
            rest = _records(source.iter_sse(), 2 * len(missed))
        # No gap: the seqs follow on from the last one seen.
        assert [event.id for event in rest] == [str(seq) for seq in range(3, 11)]
        assert [e.id for e in rest] == [str(_data(e)["seq"]) for e in rest]
        # Every settlement once, in admission order, each after its run's record.
        assert [(_data(e)["submission_id"], _data(e)["kind"]) for e in rest] == [
            pair for sub in missed for pair in ((sub, "record"), (sub, SETTLED))]
        bodies = [_data(e)["body"] for e in rest if _data(e)["kind"] == SETTLED]
        assert bodies == [{"submission_id": sub, "outcome": "completed", "result": {"text": t}}
                          for sub, t in zip(missed, texts, strict=True)]
        # The history route pages the same log: the stream invents nothing and skips nothing.
        page = client.get(_thread(thread) + "/history").json()["records"]
        assert [(r["seq"], r["record_id"]) for r in page] == [
            (_data(e)["seq"], _data(e)["record_id"]) for e in [reply, settled, *rest]]
