"""Bounded event streams in real workerd, through the Worker: over the cap a stream is refused
with 503 and Retry-After, and the slot a closed stream frees is taken again.

The ``caps-*`` spaces are served by the probe's ``CappedThreadObject`` (``probe_streams.py``):
three streams per space, a one-second heartbeat, so the object notices a departed client within
a second (or closes its stream after three, the stall bound). Every wait is a bounded poll.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest
from workerd_runtime import TOKEN, Runtime, wait_for

from threadline.client import Client
from threadline.errors import ApiError

CAP = 3
READ_TIMEOUT_S = 10.0
#: Bound on the object noticing a closed stream: a heartbeat (1 s), else the stall bound (3 s).
FREED_WITHIN_S = 15.0


def _events(space: str, thread: str = "t1") -> str:
    return f"/v1/spaces/{space}/threads/{thread}/events"


@contextmanager
def _http(runtime: Runtime) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=runtime.url, headers={"authorization": f"Bearer {TOKEN}"},
                      timeout=httpx.Timeout(READ_TIMEOUT_S)) as client:
        yield client


def _open(client: httpx.Client, space: str) -> httpx.Response:
    """A stream's response, its headers read and its body left open."""
    request = client.build_request("GET", _events(space), headers={"accept": "text/event-stream"})
    return client.send(request, stream=True)


def _hold(held: ExitStack, reply: httpx.Response) -> httpx.Response:
    """Keep ``reply`` open until ``held`` closes."""
    held.callback(reply.close)
    return reply


def _count(client: httpx.Client, space: str) -> dict[str, Any]:
    reply = client.get(f"/_streams/{space}/count")
    assert reply.status_code == 200, reply.text
    counts: dict[str, Any] = reply.json()
    return counts


def _accepted(client: httpx.Client, space: str) -> httpx.Response | None:
    reply = _open(client, space)
    if reply.status_code == 200:
        return reply
    assert reply.status_code == 503, reply.read()
    reply.close()
    return None


def test_streams_over_the_cap_are_refused_and_a_freed_slot_is_reusable(
    workerd: Runtime,
) -> None:
    space = "caps-reuse"
    with _http(workerd) as client, ExitStack() as held:
        streams = [_hold(held, _open(client, space)) for _ in range(CAP)]
        assert [s.status_code for s in streams] == [200] * CAP
        assert _count(client, space)["streams"] == CAP
        refused = client.get(_events(space))
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"  # one heartbeat interval
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["type"] == "urn:threadline:problem:streams-exhausted"
        assert _count(client, space)["streams"] == CAP  # the refusal took no slot
        # A client goes away; once the object notices, its slot is taken again.
        streams.pop().close()
        again = wait_for(lambda: _accepted(client, space), timeout=FREED_WITHIN_S,
                         interval=0.2, what="a stream accepted in the freed slot")
        _hold(held, again)
        assert _count(client, space)["streams"] == CAP
        assert client.get(_events(space)).status_code == 503
    with _http(workerd) as client:
        wait_for(lambda: _count(client, space)["streams"] == 0, timeout=FREED_WITHIN_S,
                 what="every slot of the space freed")
        assert _count(client, space)["subscribers"] == 0


def test_the_client_waits_out_retry_after_until_a_slot_frees(workerd: Runtime) -> None:
    space = "caps-client"
    with _http(workerd) as client, ExitStack() as held:
        reply = client.post(f"/v1/spaces/{space}/threads/t1/submissions",
                            json={"agent": "echo", "input": {"n": 1}})
        assert reply.status_code == 202, reply.text
        streams = [_hold(held, _open(client, space)) for _ in range(CAP)]
        assert [s.status_code for s in streams] == [200] * CAP
        waits: list[float] = []

        def sleep(seconds: float) -> None:
            # The first wait is when another client lets go of its stream.
            if not waits:
                streams.pop().close()
            waits.append(seconds)
            time.sleep(seconds)

        with Client(workerd.url, TOKEN, sleep=sleep, timeout=READ_TIMEOUT_S) as threads:
            events = threads.events(space, "t1", max_busy_retries=int(FREED_WITHIN_S))
            first = next(events)
            events.close()  # type: ignore[attr-defined]
        assert first.kind in ("record", "submission")
        assert waits and all(wait == 1 for wait in waits)
        # Over a full space with its allowance spent, the problem is raised.
        with Client(workerd.url, TOKEN, sleep=lambda _: None, timeout=READ_TIMEOUT_S) as threads:
            wait_for(lambda: _count(client, space)["streams"] < CAP, timeout=FREED_WITHIN_S,
                     what="the client's stream freed")
            _hold(held, _open(client, space))
            with pytest.raises(ApiError) as raised:
                next(threads.events(space, "t1", max_busy_retries=2))
        assert raised.value.status == 503
