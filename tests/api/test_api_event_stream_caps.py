"""Bounded event streams: per-object and per-principal caps, Retry-After, slots freed once."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from api_support import Api, run
from sse_support import StreamReader, call, drive, pending, submit, turns

from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.access import STREAM_KEY_HEADER
from threadline.api.http import Response
from threadline.api.stream_slots import Slot, SlotStream, StreamSlots

OBJECT_CAP = 3
SUBJECT_CAP = 2
HEARTBEAT_MS = 4_000


@pytest.fixture
def capped(clock: ManualClock) -> Api:
    app = Application(RuntimeConfig(
        max_event_streams=OBJECT_CAP, max_event_streams_per_subject=SUBJECT_CAP,
        sse_heartbeat_ms=HEARTBEAT_MS,
    ))

    @app.agent("quiet")
    async def quiet(turn: Turn) -> Any:
        return None

    return Api(app, clock)


async def _get(api: Api, key: str | None = None, *, method: str = "GET", thread: str = "t1",
               headers: dict[str, str] | None = None) -> Response:
    sent = dict(headers or {})
    if key is not None:
        sent[STREAM_KEY_HEADER] = key
    return await call(api, method, api.thread_path(thread) + "/events", headers=sent)


async def _open(api: Api, key: str | None = None, thread: str = "t1") -> StreamReader:
    reply = await _get(api, key, thread=thread)
    assert reply.status == 200, reply.body
    return StreamReader(reply)


def _assert_refused(reply: Response, status: int, slug: str) -> None:
    assert reply.status == status, reply.body
    assert reply.stream is None
    assert reply.headers["content-type"] == "application/problem+json"
    problem = reply.json()
    assert problem["type"] == f"urn:threadline:problem:{slug}"
    assert problem["status"] == status
    # One heartbeat interval, in whole seconds.
    assert reply.headers["retry-after"] == str(HEARTBEAT_MS // 1000)


def _open_counts(api: Api) -> tuple[int, int]:
    """Slots held, and subscriptions open (a stream subscribes at its first read)."""
    return len(api.space.api.streams), len(api.space.api.subscribers)


def test_a_principal_over_its_cap_is_refused_429_with_retry_after(capped: Api) -> None:
    async def go() -> None:
        readers = [await _open(capped, "user:1") for _ in range(SUBJECT_CAP)]
        refused = await _get(capped, "user:1")
        _assert_refused(refused, 429, "too-many-streams")
        # The refusal took nothing, and the principal may stream on another Thread no more.
        assert len(capped.space.api.streams) == SUBJECT_CAP
        assert capped.space.api.streams.held_by("user:1") == SUBJECT_CAP
        _assert_refused(await _get(capped, "user:1", thread="t2"), 429, "too-many-streams")
        for reader in readers:
            await reader.close()

    run(go())


def test_a_full_object_refuses_503_with_retry_after(capped: Api) -> None:
    async def go() -> None:
        readers = [await _open(capped, f"user:{n}") for n in range(OBJECT_CAP)]
        # A principal well under its own cap, and one without a key, meet the full object.
        _assert_refused(await _get(capped, "user:new"), 503, "streams-exhausted")
        _assert_refused(await _get(capped), 503, "streams-exhausted")
        assert _open_counts(capped) == (OBJECT_CAP, 0)
        assert capped.space.api.streams.held_by("user:new") == 0
        for reader in readers:
            await reader.close()
        assert _open_counts(capped) == (0, 0)

    run(go())


def test_a_principal_at_its_cap_on_a_full_object_is_told_429(capped: Api) -> None:
    async def go() -> None:
        readers = [await _open(capped, "user:1") for _ in range(SUBJECT_CAP)]
        readers.append(await _open(capped, "user:2"))
        _assert_refused(await _get(capped, "user:1"), 429, "too-many-streams")
        _assert_refused(await _get(capped, "user:2"), 503, "streams-exhausted")
        for reader in readers:
            await reader.close()

    run(go())


def test_a_freed_slot_is_reusable_after_a_client_goes_away(capped: Api) -> None:
    async def go() -> None:
        await submit(capped, "t1", None, agent="quiet")
        await drive(capped)
        readers = [await _open(capped) for _ in range(OBJECT_CAP)]
        for reader in readers:
            assert (await reader.next()).data["kind"] == "submission.settled"
        assert _open_counts(capped) == (OBJECT_CAP, OBJECT_CAP)
        _assert_refused(await _get(capped), 503, "streams-exhausted")
        # The client closes its stream.
        await readers.pop().close()
        assert _open_counts(capped) == (OBJECT_CAP - 1, OBJECT_CAP - 1)
        readers.append(await _open(capped))
        _assert_refused(await _get(capped), 503, "streams-exhausted")
        # The platform gives up a read in progress when the client leaves.
        waiting = await pending(readers[0])
        waiting.cancel()
        await turns()
        assert _open_counts(capped)[0] == OBJECT_CAP - 1
        replacement = await _open(capped)
        # Closing again a stream that already ended gives nothing back twice.
        await readers[0].close()
        await readers[0].close()
        assert _open_counts(capped)[0] == OBJECT_CAP
        for reader in [*readers[1:], replacement]:
            await reader.close()
        assert _open_counts(capped) == (0, 0)

    run(go())


def test_a_stream_closed_or_dropped_before_its_first_read_frees_its_slot(capped: Api) -> None:
    async def go() -> None:
        # Closed before the platform ever pulled from it (a client gone at once).
        never_read = await _get(capped, "user:1")
        assert never_read.stream is not None
        assert len(capped.space.api.streams) == 1
        await never_read.stream.aclose()  # type: ignore[attr-defined]
        assert len(capped.space.api.streams) == 0
        assert capped.space.api.streams.held_by("user:1") == 0
        # Neither read nor closed: the response is dropped (an object that lost it).
        dropped = await _get(capped, "user:1")
        assert len(capped.space.api.streams) == 1
        del dropped
        gc.collect()
        assert len(capped.space.api.streams) == 0
        assert capped.space.api.streams.held_by("user:1") == 0
        assert len(capped.space.api.subscribers) == 0

    run(go())


def test_head_frees_its_slot_at_once(capped: Api) -> None:
    async def go() -> None:
        for _ in range(OBJECT_CAP + 2):
            reply = await _get(capped, "user:1", method="HEAD")
            assert reply.status == 200 and reply.body == b"" and reply.stream is None
        assert _open_counts(capped) == (0, 0)
        readers = [await _open(capped, "user:1") for _ in range(SUBJECT_CAP)]
        # HEAD mirrors GET: over the cap it answers the refusal's status.
        refused = await _get(capped, "user:1", method="HEAD")
        assert refused.status == 429 and refused.headers["retry-after"] == "4"
        assert len(capped.space.api.streams) == SUBJECT_CAP
        for reader in readers:
            await reader.close()

    run(go())


def test_per_key_counts_are_independent_across_keys(capped: Api) -> None:
    async def go() -> None:
        first = [await _open(capped, "user:1") for _ in range(SUBJECT_CAP)]
        _assert_refused(await _get(capped, "user:1"), 429, "too-many-streams")
        other = await _open(capped, "user:2")
        assert capped.space.api.streams.held_by("user:1") == SUBJECT_CAP
        assert capped.space.api.streams.held_by("user:2") == 1
        # Freeing one of user:1's slots gives user:1 a stream again, not anyone's count more.
        await first.pop().close()
        await other.close()
        assert capped.space.api.streams.held_by("user:2") == 0
        again = await _open(capped, "user:1")
        assert capped.space.api.streams.held_by("user:1") == SUBJECT_CAP
        for reader in [*first, again]:
            await reader.close()

    run(go())


@pytest.mark.parametrize("key", [None, ""])
def test_without_a_stream_key_only_the_object_cap_applies(capped: Api, key: str | None) -> None:
    async def go() -> None:
        # More than one principal's share, all without a key: only the object's cap counts.
        readers = [await _open(capped, key) for _ in range(OBJECT_CAP)]
        assert OBJECT_CAP > SUBJECT_CAP
        _assert_refused(await _get(capped, key), 503, "streams-exhausted")
        for reader in readers:
            await reader.close()

    run(go())


def test_a_request_refused_for_another_reason_takes_no_slot(capped: Api) -> None:
    async def go() -> None:
        bad_header = await _get(capped, "user:1", headers={"last-event-id": "x"})
        assert bad_header.status == 400
        past_the_end = await call(capped, "GET", capped.thread_path("t1") + "/events?after=9",
                                  headers={STREAM_KEY_HEADER: "user:1"})
        assert past_the_end.status == 422
        assert len(capped.space.api.streams) == 0
        assert capped.space.api.streams.held_by("user:1") == 0
        # Refusals over the caps take nothing either (counted above per test); nothing stored.
        before = capped.dump()
        readers = [await _open(capped, "user:1") for _ in range(SUBJECT_CAP)]
        await _get(capped, "user:1")
        assert capped.dump() == before
        for reader in readers:
            await reader.close()

    run(go())


def test_a_stream_that_ends_or_fails_frees_its_slot() -> None:
    config = RuntimeConfig(max_event_streams=2)
    slots = StreamSlots()

    async def ends() -> AsyncIterator[bytes]:
        yield b"one"

    async def fails() -> AsyncIterator[bytes]:
        yield b"one"
        raise RuntimeError("storage went away")

    async def go() -> None:
        slot = slots.take("k", config)
        assert isinstance(slot, Slot)
        finite = SlotStream(ends(), slot)
        assert [chunk async for chunk in finite] == [b"one"]
        assert len(slots) == 0 and slots.held_by("k") == 0
        slot = slots.take("k", config)
        assert isinstance(slot, Slot)
        failing = SlotStream(fails(), slot)
        assert await anext(failing) == b"one"
        with pytest.raises(RuntimeError):
            await anext(failing)
        assert len(slots) == 0
        # Ended: a further read ends at once and closing gives nothing back twice.
        with pytest.raises(StopAsyncIteration):
            await anext(failing)
        await failing.aclose()
        assert len(slots) == 0 and slots.held_by("k") == 0

    run(go())
