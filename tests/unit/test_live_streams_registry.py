"""The object's live streams (``threadline.threads.live_text``): readers are woken by a change
of their Thread and by nothing else, every reader waiting on a Thread is woken, a finished
stream leaves the open ones, and memory stays bounded (finished streams per Thread, idle
Threads per object)."""

from __future__ import annotations

import asyncio

from threadline.threads.live_text import (
    FINISHED_KEPT,
    THREADS_KEPT,
    LiveState,
    LiveStreams,
    LiveText,
)


def _stream(thread: str = "t", n: int = 1) -> LiveText:
    return LiveText(f"s{n}", thread, "sub", "message")


def test_a_reader_of_a_quiet_thread_is_not_woken_until_something_changes() -> None:
    async def go() -> None:
        live = LiveStreams()
        waiting = live.changed("t", live.version("t"))
        await asyncio.sleep(0)
        assert not waiting.done()
        live.open(_stream())
        assert waiting.done()

    asyncio.run(go())


def test_every_reader_waiting_on_a_thread_is_woken() -> None:
    async def go() -> None:
        live = LiveStreams()
        stream = _stream()
        live.open(stream)
        version = live.version("t")
        first = live.changed("t", version)
        second = live.changed("t", version)
        # A reader that stopped waiting leaves a cancelled waiter behind; it is dropped.
        gone = live.changed("t", version)
        gone.cancel()
        third = live.changed("t", version)
        live.write(stream, "hi")
        assert first.done() and second.done() and third.done()

    asyncio.run(go())


def test_an_empty_delta_or_one_after_the_end_changes_nothing_and_wakes_nobody() -> None:
    async def go() -> None:
        live = LiveStreams()
        stream = _stream()
        live.open(stream)
        live.write(stream, "so far")
        version = live.version("t")
        waiting = live.changed("t", version)
        live.write(stream, "")
        assert live.version("t") == version and not waiting.done()
        assert (stream.text(), stream.length) == ("so far", 6)
        live.finish(stream, LiveState.ABANDONED)
        version = live.version("t")
        live.write(stream, "too late")
        assert live.version("t") == version
        assert (stream.parts, stream.length, stream.state) == ([], 6, LiveState.ABANDONED)
        waiting.cancel()

    asyncio.run(go())


def test_a_finished_stream_leaves_the_open_ones_and_is_listed_once() -> None:
    live = LiveStreams()
    done, going = _stream(n=1), _stream(n=2)
    live.open(done)
    live.open(going)
    live.finish(done, LiveState.CLOSED, seq=7)
    live.finish(done, LiveState.ABANDONED)  # a stream already finished stays as it ended
    assert live.snapshot("t") == [going, done]
    assert (done.state, done.seq) == (LiveState.CLOSED, 7)


def test_a_thread_keeps_its_last_finished_streams_only() -> None:
    live = LiveStreams()
    streams = [_stream(n=n) for n in range(FINISHED_KEPT + 3)]
    for stream in streams:
        live.open(stream)
        live.finish(stream, LiveState.ABANDONED)
    assert live.snapshot("t") == streams[-FINISHED_KEPT:]


def _idle(live: LiveStreams, count: int) -> None:
    for n in range(count):
        stream = _stream(f"t{n}")
        live.open(stream)
        live.finish(stream, LiveState.CLOSED, seq=1)


def test_idle_threads_past_the_bound_are_forgotten_oldest_first() -> None:
    live = LiveStreams()
    _idle(live, THREADS_KEPT)
    assert len(live.snapshot("t0")) == 1  # at the bound, nothing is forgotten
    live.open(_stream("one more"))
    assert live.snapshot("t0") == [] and len(live.snapshot("t1")) == 1


def test_a_thread_read_or_written_is_not_forgotten_nor_any_newer_one() -> None:
    async def go() -> None:
        read = LiveStreams()
        waiting = read.changed("read", read.version("read"))
        _idle(read, THREADS_KEPT)
        assert not waiting.done()
        # The oldest Thread has a reader: it is kept (its reader is woken by its next
        # stream), and the sweep looks no further.
        assert len(read.snapshot("t0")) == 1
        read.open(_stream("read"))
        assert waiting.done()
        written = LiveStreams()
        busy = _stream("busy")
        written.open(busy)
        _idle(written, THREADS_KEPT)
        assert written.snapshot("busy") == [busy] and len(written.snapshot("t0")) == 1

    asyncio.run(go())
