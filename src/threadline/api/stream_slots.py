"""How many event streams an object serves at once: one slot per open stream, in memory.

Each open stream holds memory in the object (its generator, its subscription, the platform's
stream and, behind a Worker hop, the hop's buffers), and the platform gives an object 128 MB.
So an object serves at most ``max_event_streams`` streams, and one principal at most
``max_event_streams_per_subject`` of them, counted under the key the Worker sets in
:data:`threadline.access.STREAM_KEY_HEADER` (no key: counted only against the object's cap).

A slot is taken when a stream's response is built and given back exactly once when the stream
ends, whichever way it ends: the consumer closes it (a client leaving, the stall watchdog, a
HEAD answered at once), it fails, or it is dropped without ever being read. The count lives in
memory only and writes nothing: an evicted object's streams ended with it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

from threadline.config import RuntimeConfig

#: Problem type of a principal over its own cap (429) and of a full object (503).
TOO_MANY_STREAMS = "too-many-streams"
STREAMS_EXHAUSTED = "streams-exhausted"


def retry_after_s(config: RuntimeConfig) -> int:
    """The ``Retry-After`` of a refused stream, in seconds: one heartbeat interval.

    Slots free when streams end, and a stream whose client left unnoticed is found out at the
    latest when its next heartbeat is written: asking sooner mostly meets the same full count
    again, asking much later leaves a freed slot idle. 15 s with the default heartbeat.
    """
    return max(1, math.ceil(config.sse_heartbeat_ms / 1000))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a stream was not admitted: the problem type and its detail."""

    slug: str
    detail: str


class Slot:
    """One admitted stream's place in its :class:`StreamSlots`; released once, then inert."""

    __slots__ = ("_key", "_owner")

    def __init__(self, owner: StreamSlots, key: str | None) -> None:
        self._owner: StreamSlots | None = owner
        self._key = key

    @property
    def held(self) -> bool:
        """True until :meth:`release` has run."""
        return self._owner is not None

    def release(self) -> None:
        """Give the slot back; a second call changes nothing."""
        owner, self._owner = self._owner, None
        if owner is not None:
            owner._give_back(self._key)


class StreamSlots:
    """The object's open event streams: how many in all, and how many under each key."""

    def __init__(self) -> None:
        self._open = 0
        self._by_key: dict[str, int] = {}

    def __len__(self) -> int:
        return self._open

    def held_by(self, key: str) -> int:
        """Streams open under ``key``."""
        return self._by_key.get(key, 0)

    def take(self, key: str | None, config: RuntimeConfig) -> Slot | Refusal:
        """A slot for a new stream under ``key`` (None or empty: no per-key cap), or why not.

        A refusal takes nothing. A principal at its own cap is told so (429) even when the
        object is full too: closing one of its streams is what it can do about it.
        """
        key = key or None
        if key is not None and self.held_by(key) >= config.max_event_streams_per_subject:
            return Refusal(
                TOO_MANY_STREAMS,
                f"this principal already holds {config.max_event_streams_per_subject} event"
                " streams on this space; close one first",
            )
        if self._open >= config.max_event_streams:
            return Refusal(
                STREAMS_EXHAUSTED,
                f"this space serves {config.max_event_streams} event streams at once and all"
                " are open",
            )
        self._open += 1
        if key is not None:
            self._by_key[key] = self._by_key.get(key, 0) + 1
        return Slot(self, key)

    def _give_back(self, key: str | None) -> None:
        self._open -= 1
        if key is not None:
            left = self._by_key[key] - 1
            if left:
                self._by_key[key] = left
            else:
                # No entry per principal that once streamed: the map stays as small as the
                # set of principals streaming now.
                del self._by_key[key]


class SlotStream:
    """An event stream that gives its slot back when it ends, however it ends.

    The slot is not released from inside the stream's generator: a generator closed or dropped
    before its first step never runs its ``finally``. Here the release happens when the stream
    is exhausted or fails, when :meth:`aclose` is called (started or not), and as a last resort
    when the object is garbage (a response never sent, nor closed).
    """

    def __init__(self, chunks: AsyncIterator[bytes], slot: Slot) -> None:
        self._chunks = chunks
        self._slot = slot

    def __aiter__(self) -> SlotStream:
        return self

    async def __anext__(self) -> bytes:
        if not self._slot.held:
            raise StopAsyncIteration
        try:
            return await anext(self._chunks)
        except BaseException:
            # Ended (exhausted, failed, or cancelled mid-read, which closes the generator).
            self._slot.release()
            raise

    async def aclose(self) -> None:
        """Close the stream and give its slot back."""
        try:
            closer = getattr(self._chunks, "aclose", None)
            if closer is not None:
                await closer()
        finally:
            self._slot.release()

    def __del__(self) -> None:
        self._slot.release()


__all__ = [
    "STREAMS_EXHAUSTED",
    "TOO_MANY_STREAMS",
    "Refusal",
    "Slot",
    "SlotStream",
    "StreamSlots",
    "retry_after_s",
]
