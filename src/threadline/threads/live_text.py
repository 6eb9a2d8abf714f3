"""Streamed output in flight: the text an Attempt is writing, held in memory, never stored.

An agent's ``turn.stream()`` (:class:`~threadline.threads.turn_stream.TextStream`) appends its
deltas here; the Thread's open event streams read them from here, woken by this registry's own
per-Thread change counter (a delta wakes the readers of its Thread only, and reads no storage).
Closing a stream appends one record with the whole text to the Thread's log, in the commit of
the step it belongs to; the live entry then says ``closed`` and names that record's seq. An
Attempt that ends without closing it, or whose step try fails after it closed, leaves it
``abandoned``: the readers are told, and nothing of it is stored. A stream's id names the
claim it was written under, so a retry never continues a dead try's text.

The registry lives as long as the object's incarnation; after an eviction the partial text of
any stream is gone (its Attempt is lost, and its retry writes the text again). Memory is
bounded: an open stream holds at most its record's size of text, a finished one only its id,
state and length, and each Thread keeps its last ``FINISHED_KEPT`` finished ones.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from enum import StrEnum


class LiveState(StrEnum):
    """Where a live stream is: being written, closed into a record, or abandoned."""

    OPEN = "open"
    CLOSED = "closed"
    ABANDONED = "abandoned"


#: Finished streams each Thread remembers (their end is told to readers that followed them).
FINISHED_KEPT = 8
#: Threads whose streams are remembered; the least recently written are forgotten first.
THREADS_KEPT = 1_000


@dataclass(slots=True)
class LiveText:
    """One stream: its id, the submission writing it, the record kind it closes into, and
    its text so far (kept only while open)."""

    id: str
    thread_id: str
    submission_id: str
    kind: str
    parts: list[str] = field(default_factory=list)
    length: int = 0
    state: LiveState = LiveState.OPEN
    #: The seq of the record it closed into.
    seq: int | None = None

    def text(self) -> str:
        """The text written so far (empty once finished: the record holds a closed one's)."""
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


class _ThreadStreams:
    def __init__(self) -> None:
        self.open: dict[str, LiveText] = {}
        self.finished: deque[LiveText] = deque(maxlen=FINISHED_KEPT)
        self.version = 0
        self.waiters: list[asyncio.Future[None]] = []


class LiveStreams:
    """The object's live streams, by Thread, with a change counter per Thread."""

    def __init__(self) -> None:
        self._threads: OrderedDict[str, _ThreadStreams] = OrderedDict()

    def open(self, stream: LiveText) -> None:
        """Start ``stream`` (its readers see it at their next wake)."""
        streams = self._thread(stream.thread_id)
        streams.open[stream.id] = stream
        self._notify(streams)

    def write(self, stream: LiveText, delta: str) -> None:
        """Append ``delta`` to an open stream."""
        if stream.state is not LiveState.OPEN or not delta:
            return
        stream.parts.append(delta)
        stream.length += len(delta)
        self._notify(self._thread(stream.thread_id))

    def finish(self, stream: LiveText, state: LiveState, seq: int | None = None) -> None:
        """End an open stream as ``closed`` (into the record ``seq``) or ``abandoned``; a
        stream already finished stays as it ended."""
        if stream.state is not LiveState.OPEN:
            return
        stream.state = state
        stream.seq = seq
        stream.parts.clear()
        streams = self._thread(stream.thread_id)
        streams.open.pop(stream.id, None)
        streams.finished.append(stream)
        self._notify(streams)

    def snapshot(self, thread_id: str) -> list[LiveText]:
        """The Thread's open streams (oldest first), then its recently finished ones."""
        streams = self._threads.get(thread_id)
        if streams is None:
            return []
        return [*streams.open.values(), *streams.finished]

    def version(self, thread_id: str) -> int:
        """The Thread's change counter: take it before reading a snapshot."""
        streams = self._threads.get(thread_id)
        return 0 if streams is None else streams.version

    def changed(self, thread_id: str, version: int) -> asyncio.Future[None]:
        """A future resolved once the Thread's counter differs from ``version``; cancelling it
        is how a reader stops waiting."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        streams = self._thread(thread_id)
        if streams.version != version:
            waiter.set_result(None)
        else:
            # A reader that stopped waiting (its heartbeat came first) left a cancelled one.
            streams.waiters = [w for w in streams.waiters if not w.done()]
            streams.waiters.append(waiter)
        return waiter

    def _thread(self, thread_id: str) -> _ThreadStreams:
        streams = self._threads.get(thread_id)
        if streams is None:
            streams = self._threads[thread_id] = _ThreadStreams()
            self._forget_idle()
        else:
            self._threads.move_to_end(thread_id)
        return streams

    def _forget_idle(self) -> None:
        while len(self._threads) > THREADS_KEPT:
            thread_id, oldest = next(iter(self._threads.items()))
            if oldest.open or oldest.waiters:
                # Still written or read: keep it, and look no further (the rest is newer).
                break
            del self._threads[thread_id]

    def _notify(self, streams: _ThreadStreams) -> None:
        streams.version += 1
        waiters, streams.waiters = streams.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


__all__ = ["FINISHED_KEPT", "THREADS_KEPT", "LiveState", "LiveStreams", "LiveText"]
