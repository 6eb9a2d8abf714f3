"""The bounds of a step's try (records it may hold) and of a stream's text, at their edges."""

from __future__ import annotations

import asyncio

import pytest

from threadline.errors import ValidationFailed, ValueTooLarge
from threadline.threads.live_text import LiveState, LiveStreams, LiveText
from threadline.threads.model import encode_json
from threadline.threads.turn_stream import MAX_STEP_RECORDS, StepTry, TextStream


def _try(max_bytes: int = 10**9) -> StepTry:
    return StepTry(object(), "sub_1", "step:answer", max_bytes)


def test_records_are_numbered_in_the_try_from_one() -> None:
    held = _try()
    assert held.add("note", "1") == "sub_1:step:answer:record#1"
    assert held.add("note", "2") == "sub_1:step:answer:record#2"
    assert [r.body_json for r in held.records] == ["1", "2"]


def test_a_try_holds_max_step_records_and_refuses_one_more() -> None:
    held = _try()
    for n in range(MAX_STEP_RECORDS):
        held.add("note", str(n))
    with pytest.raises(ValidationFailed) as refused:
        held.add("note", "one more")
    assert refused.value.field == "record"
    assert refused.value.message == (f"a step may add at most {MAX_STEP_RECORDS} records "
                                     "(emits and closed streams) per try")


def test_a_try_holds_its_bytes_exactly_and_refuses_one_more() -> None:
    held = _try(max_bytes=10)
    held.add("note", "12345")
    held.add("note", "67890")
    with pytest.raises(ValueTooLarge) as refused:
        held.add("note", "x")
    assert refused.value.field == "record"
    assert refused.value.message == "the records of one step's try exceed 10 bytes"


def test_an_ended_try_refuses_more() -> None:
    held = _try()
    held.abandon(LiveStreams())
    with pytest.raises(ValidationFailed) as refused:
        held.add("note", "late")
    assert (refused.value.field, refused.value.message) == (
        "record", "the step this record belongs to has ended")


def _stream(max_bytes: int) -> tuple[TextStream, LiveText, LiveStreams]:
    live = LiveStreams()
    entry = LiveText("sub_1.1.1", "t", "sub_1", "message")
    live.open(entry)
    return TextStream(live, entry, _try(), encode=lambda v, field: encode_json(v),
                      max_bytes=max_bytes, meta={}), entry, live


def test_a_streams_text_fits_its_bound_exactly_and_not_one_byte_more() -> None:
    async def go() -> None:
        stream, entry, _ = _stream(max_bytes=6)
        await stream.write("abc")
        await stream.write("déf"[:2])  # 3 bytes: "d" and "é"
        assert entry.text() == "abcdé"
        with pytest.raises(ValueTooLarge) as refused:
            await stream.write("x")
        assert (refused.value.field, refused.value.message) == (
            "delta", "a stream's text exceeds 6 bytes")

    asyncio.run(go())


def test_a_stream_writes_text_only_and_nothing_once_it_ended() -> None:
    async def go() -> None:
        stream, entry, live = _stream(max_bytes=100)
        with pytest.raises(ValidationFailed) as not_text:
            await stream.write(b"bytes")  # type: ignore[arg-type]
        assert (not_text.value.field, not_text.value.message) == (
            "delta", "a stream writes text (str)")
        live.finish(entry, LiveState.ABANDONED)
        with pytest.raises(ValidationFailed) as ended:
            await stream.write("more")
        assert (ended.value.field, ended.value.message) == ("delta", "the stream is closed")

    asyncio.run(go())
