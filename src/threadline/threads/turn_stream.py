"""``turn.stream()``: text an agent streams to the Thread's readers as it writes it.

Inside a step, ``async with turn.stream(kind="message") as s: await s.write(delta)`` hands
each delta to the object's live streams (:mod:`threadline.threads.live_text`), which the
Thread's open event streams read as it comes; nothing is stored per delta. Leaving the block
adds ONE record with the whole text (``{"text", "stream", **meta}``) to the step's try: it
commits with the step's journal entry, so a try that fails stores nothing of it and its
readers are told the stream was abandoned. See :class:`StepTry` for the records a try holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from threadline.errors import ValidationFailed, ValueTooLarge
from threadline.threads.live_text import LiveState, LiveStreams, LiveText
from threadline.threads.model import JsonValue

#: Records one try of a step may hold (its emits and closed streams) until it commits.
MAX_STEP_RECORDS = 1_000
#: Keys of a stream's record the runtime writes; ``meta`` may not set them.
STREAM_BODY_KEYS = ("text", "stream")


@dataclass(slots=True)
class PendingRecord:
    """A record a step's try made, to append when the step's journal entry commits."""

    record_id: str
    kind: str
    body_json: str
    #: The live stream this record closes, if it is one.
    stream: LiveText | None = None


@dataclass(slots=True)
class StepTry:
    """One try of a step's function: the Turn (``owner``) and step it belongs to, the records
    it made and the live streams it opened. Only a try that returns commits its records."""

    owner: object
    submission_id: str
    key: str
    #: Bytes of the records' bodies together this try may hold.
    max_bytes: int
    records: list[PendingRecord] = field(default_factory=list)
    streams: list[LiveText] = field(default_factory=list)
    bytes: int = 0
    #: The try committed or was abandoned: nothing more may be added to it.
    ended: bool = False

    def add(self, kind: str, body_json: str, *, stream: LiveText | None = None) -> str:
        """Hold a record for the commit; its id names the step and its place in the try."""
        if self.ended:
            # A task the step's function started, still running after the step ended: its
            # record would be lost in silence.
            raise ValidationFailed("the step this record belongs to has ended", field="record")
        if len(self.records) >= MAX_STEP_RECORDS:
            raise ValidationFailed(f"a step may add at most {MAX_STEP_RECORDS} records "
                                   "(emits and closed streams) per try", field="record")
        size = len(body_json.encode())
        if self.bytes + size > self.max_bytes:
            raise ValueTooLarge(f"the records of one step's try exceed {self.max_bytes} bytes",
                                field="record")
        self.bytes += size
        record_id = f"{self.submission_id}:{self.key}:record#{len(self.records) + 1}"
        self.records.append(PendingRecord(record_id, kind, body_json, stream))
        return record_id

    def abandon(self, live: LiveStreams) -> None:
        """The try ends: every stream it opened and did not close is abandoned."""
        self.ended = True
        for stream in self.streams:
            live.finish(stream, LiveState.ABANDONED)


class TextStream:
    """An open stream of text (see the module docstring). ``meta`` holds JSON values the
    agent adds to the record (any key but ``text`` and ``stream``)."""

    def __init__(self, live: LiveStreams, entry: LiveText, step: StepTry, *,
                 encode: Any, max_bytes: int, meta: dict[str, JsonValue]) -> None:
        self._live = live
        self._entry = entry
        self._step = step
        self._encode = encode
        self._max_bytes = max_bytes
        self._bytes = 0
        self.meta = meta

    @property
    def id(self) -> str:
        """The stream's id, as its readers see it (unique to this try of this Attempt)."""
        return self._entry.id

    @property
    def text(self) -> str:
        """The text written so far."""
        return self._entry.text()

    async def write(self, delta: str) -> None:
        """Send ``delta`` to the Thread's readers; the text may grow to the record's bound
        (``max_value_bytes``), past which ``ValueTooLarge`` fails the Attempt for good."""
        if not isinstance(delta, str):
            raise ValidationFailed("a stream writes text (str)", field="delta")
        if self._entry.state is not LiveState.OPEN:
            raise ValidationFailed("the stream is closed", field="delta")
        self._bytes += len(delta.encode("utf-8", "surrogatepass"))
        if self._bytes > self._max_bytes:
            raise ValueTooLarge(f"a stream's text exceeds {self._max_bytes} bytes",
                                field="delta")
        self._live.write(self._entry, delta)

    async def __aenter__(self) -> TextStream:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if error is not None:
            self._live.finish(self._entry, LiveState.ABANDONED)
            return
        reserved = [key for key in STREAM_BODY_KEYS if key in self.meta]
        if reserved:
            self._live.finish(self._entry, LiveState.ABANDONED)
            raise ValidationFailed(f"a stream's meta may not set {reserved[0]!r}", field="meta")
        body = {**self.meta, "text": self._entry.text(), "stream": self._entry.id}
        try:
            body_json = self._encode(body, field="stream record")
            self._step.add(self._entry.kind, body_json, stream=self._entry)
        except BaseException:
            self._live.finish(self._entry, LiveState.ABANDONED)
            raise


__all__ = ["MAX_STEP_RECORDS", "PendingRecord", "StepTry", "TextStream"]
