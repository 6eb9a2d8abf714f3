"""The example ``chat`` agent in real workerd against the fake provider on 127.0.0.1.

The model's answer comes over the provider's SSE a token at a time; the Worker's event stream
must hand it to a reader in pieces before the turn settles, a reader that connects mid-stream
must get the text so far, and the log must hold one record for the answer. Every wait is a
bounded read or poll.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from workerd_runtime import TOKEN, Runtime, wait_for

from threadline.testing import FakeProvider

SPACE = "chat-stream"
READ_TIMEOUT_S = 30.0
TOKENS = 12
FIRST_TOKEN_MS = 800
GAP_MS = 150


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[FakeProvider, str]]:
    fake = FakeProvider(tokens=TOKENS, first_token_ms=FIRST_TOKEN_MS, token_gap_ms=GAP_MS)
    with fake.serve() as base:
        yield fake, base


@pytest.fixture(scope="module")
def chatting(start_runtime: Callable[..., Runtime], provider: tuple[FakeProvider, str],
             tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    runtime = start_runtime(tmp_path_factory.mktemp("chat-stream"), MODEL_URL=provider[1],
                            MODEL_API_KEY="sk-workerd")
    runtime.warm()
    return runtime


def _client(runtime: Runtime) -> httpx.Client:
    return httpx.Client(base_url=runtime.url, headers={"authorization": f"Bearer {TOKEN}"},
                        timeout=httpx.Timeout(READ_TIMEOUT_S))


def _stream_events(client: httpx.Client, thread: str, until: Callable[[list[Any]], bool]
                   ) -> list[tuple[float, str, Any]]:
    """(seconds since opened, event, data) of the thread's events until ``until`` holds."""
    seen: list[tuple[float, str, Any]] = []
    opened = time.monotonic()
    with connect_sse(client, "GET", f"/v1/spaces/{SPACE}/threads/{thread}/events") as source:
        for sse in source.iter_sse():
            seen.append((time.monotonic() - opened, sse.event, json.loads(sse.data)))
            if until(seen):
                return seen
    raise AssertionError(f"the stream ended early: {seen}")


def _settled(seen: list[tuple[float, str, Any]]) -> bool:
    """The turn settled and its stream said it closed (that may come last)."""
    return any(event == "record" and data["kind"] == "submission.settled"
               for _, event, data in seen) and any(
        event == "stream" and data["state"] == "closed" for _, event, data in seen)


def test_a_streamed_answer_reaches_the_reader_in_pieces_before_the_turn_settles(
    chatting: Runtime, provider: tuple[FakeProvider, str]
) -> None:
    fake, _ = provider
    with _client(chatting) as client:
        results: list[list[tuple[float, str, Any]]] = []
        reader = threading.Thread(target=lambda: results.append(
            _stream_events(client, "live", _settled)), daemon=True)
        reader.start()
        time.sleep(0.3)  # the reader's connection opens before the submission
        reply = client.post(f"/v1/spaces/{SPACE}/threads/live/submissions",
                            json={"agent": "chat", "input": {"text": "tell me a story"}})
        assert reply.status_code == 202, reply.text
        reader.join(READ_TIMEOUT_S)
    assert results, chatting.output()[-3000:]
    seen = results[0]
    deltas = [(at, data) for at, event, data in seen
              if event == "stream" and data["state"] == "open" and data["text"]]
    settled_at = next(at for at, event, data in seen
                      if event == "record" and data["kind"] == "submission.settled")
    text = "".join(data["text"] for _, data in deltas)
    expected = fake.text({"messages": [{"role": "user", "content": "tell me a story"}]})
    assert text == expected
    # In pieces, as the provider wrote them, and before the turn settled.
    assert len(deltas) >= 3, deltas
    assert deltas[0][0] < settled_at - 0.5
    records = [data for _, event, data in seen if event == "record"]
    assert [r["kind"] for r in records] == ["message", "message", "submission.settled"]
    assert records[1]["body"]["text"] == expected and records[1]["body"]["role"] == "assistant"
    closed = [data for _, event, data in seen if event == "stream" and data["state"] == "closed"]
    assert [c["seq"] for c in closed] == [records[1]["seq"]]
    print(f"chat in workerd: first delta {deltas[0][0]:.2f} s, settled {settled_at:.2f} s, "
          f"{len(deltas)} delta events for {TOKENS} tokens")


def test_a_reader_that_connects_mid_stream_gets_the_text_so_far(
    chatting: Runtime, provider: tuple[FakeProvider, str]
) -> None:
    fake, _ = provider
    with _client(chatting) as client:
        reply = client.post(f"/v1/spaces/{SPACE}/threads/late/submissions",
                            json={"agent": "chat", "input": {"text": "a b c d"}})
        assert reply.status_code == 202, reply.text
        # Connect once the answer is under way: after the first token, before the last.
        time.sleep((FIRST_TOKEN_MS + 3 * GAP_MS) / 1000 + 0.5)
        seen = _stream_events(client, "late", _settled)
    first = next(data for _, event, data in seen if event == "stream")
    expected = fake.text({"messages": [{"role": "user", "content": "a b c d"}]})
    assert first["offset"] == 0 and first["text"], first
    assert expected.startswith(first["text"]) and first["text"] != expected
    pieces = [data for _, event, data in seen if event == "stream" and data["state"] == "open"]
    assert "".join(p["text"] for p in pieces) == expected


def test_the_chat_keeps_its_conversation_across_turns(
    chatting: Runtime, provider: tuple[FakeProvider, str], tmp_path: Path
) -> None:
    fake, _ = provider
    with _client(chatting) as client:
        for text in ("first", "second"):
            reply = client.post(f"/v1/spaces/{SPACE}/threads/talk/submissions",
                                json={"agent": "chat", "input": {"text": text}})
            assert reply.status_code == 202, reply.text
            location = reply.headers["Location"]
            wait_for(lambda at=location: client.get(at).json()["state"] == "settled",
                     timeout=READ_TIMEOUT_S, what=f"the {text!r} turn to settle")
    last = [r for r in fake.requests if r["messages"][-1]["content"] == "second"][-1]
    assert [m["role"] for m in last["messages"]] == ["user", "assistant", "user"]


def test_fifty_threads_model_calls_overlap(
    start_runtime: Callable[..., Runtime], tmp_path_factory: pytest.TempPathFactory
) -> None:
    fake = FakeProvider(tokens=200, first_token_ms=1_000, token_gap_ms=5)
    with fake.serve() as base:
        runtime = start_runtime(tmp_path_factory.mktemp("chat-fifty"), MODEL_URL=base)
        runtime.warm()
        with _client(runtime) as client:
            alone_started = time.monotonic()
            reply = client.post(f"/v1/spaces/{SPACE}/threads/alone/submissions",
                                json={"agent": "chat", "input": {"text": "hello"}})
            assert reply.status_code == 202, reply.text
            wait_for(lambda: client.get(reply.headers["Location"]).json()["state"] == "settled",
                     timeout=60, what="one chat turn alone to settle")
            alone = time.monotonic() - alone_started
            started = time.monotonic()
            locations = []
            for n in range(50):
                reply = client.post(f"/v1/spaces/{SPACE}/threads/user-{n}/submissions",
                                    json={"agent": "chat", "input": {"text": "hello"}})
                assert reply.status_code == 202, reply.text
                locations.append(reply.headers["Location"])

            settled: dict[str, Any] = {}

            def all_settled() -> list[Any] | None:
                for at in locations:
                    if at in settled:
                        continue
                    try:
                        detail = client.get(at).json()
                    except httpx.TransportError:
                        return None  # the local runtime reset a connection: ask again
                    if detail["state"] != "settled":
                        return None
                    settled[at] = detail
                return [settled[at] for at in locations]

            try:
                done = wait_for(all_settled, timeout=120, what="the 50 chat turns to settle")
            except Exception as error:
                raise AssertionError(f"{error}\n{runtime.output()[-4000:]}") from None
            elapsed = time.monotonic() - started
    assert [d["outcome"] for d in done] == ["completed"] * 50, [d["error"] for d in done]
    # The model calls ran together, not a few at a time.
    assert fake.max_in_flight >= 40, fake.max_in_flight
    print(f"chat turns in workerd: one alone {alone:.2f} s; 50 at once all settled in"
          f" {elapsed:.2f} s, "
          f"{fake.max_in_flight} model calls at once at most")
