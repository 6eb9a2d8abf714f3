"""The client side of a Thread's event stream: resuming iterators over httpx-sse.

Used by :meth:`threadline.client.Client.events` and :meth:`threadline.client.AsyncClient.events`.
A dropped connection (a transport error, or the server ending the response) is reopened with
``Last-Event-ID`` set to the seq of the last record received, so the records seen by the
caller have no gap and no duplicate. Submission state events carry no seq and are live only:
those sent while the connection was down are not replayed (each new connection opens with
the current state of the open submissions). A refused request raises the library's error at
once, without reconnecting, except a busy answer: a 429 (this principal holds too many streams)
or 503 (the space serves all the streams it can) with ``Retry-After`` is waited out (at most
:data:`MAX_RETRY_AFTER_S` per wait) and the request sent again, a bounded number of times in a
row before its error is raised.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse

from threadline.api.models import HistoryRecord

EventKind = Literal["record", "submission", "horizon", "stream"]
_KINDS: frozenset[str] = frozenset({"record", "submission", "horizon", "stream"})
#: The longest wait a ``Retry-After`` gets: a server asking for more is asked again sooner.
MAX_RETRY_AFTER_S = 60.0
#: Statuses whose ``Retry-After`` means "busy now, ask again then".
_BUSY = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class ThreadEvent:
    """One event of a Thread's stream.

    ``kind`` is ``record`` (a record of the Thread's log; ``seq`` is its seq) or
    ``submission`` (a submission's state: ``id``, ``seq``, ``state``, ``outcome``,
    ``attempts``, ``revision``; ``seq`` is None) or ``horizon`` (``{after, first_kept}``: the
    records before ``first_kept`` were deleted by the space's retention; ``seq`` is None) or
    ``stream`` (text an agent streams: ``{stream, kind, submission_id, state}`` with ``offset``
    and ``text`` while ``open``, ``seq`` of its record once ``closed``, or ``abandoned``; ``seq``
    is None; :class:`StreamedText` folds them into each stream's text). ``data`` is the
    event's JSON.

    A record's own ``kind`` (``record().kind``) is what an agent emitted (``record`` by
    default) or one of the runtime's facts (:mod:`threadline.threads.records`):
    ``submission.settled`` (body ``{submission_id, outcome, result?, error?, submitted_by?,
    aborted_by?, resolved_by?}``), ``approval.requested`` (``{submission_id, key, payload}``),
    ``approval.decided`` (``{submission_id, key, approved, decided_by?}``) or
    ``message.failed``. Records
    are resumed without a gap, so a client learns every settlement from them; ``submission``
    events are sampled live and never replayed.
    """

    kind: EventKind
    seq: int | None
    data: dict[str, Any]

    def record(self) -> HistoryRecord:
        """The record of a ``record`` event as the API's model."""
        if self.kind != "record":
            raise ValueError(f"a {self.kind} event carries no record")
        return HistoryRecord.model_validate(self.data)


def _event(sse: ServerSentEvent) -> ThreadEvent | None:
    """The event, or None for one this client does not know (ignored, for compatibility)."""
    if sse.event not in _KINDS:
        return None
    data = json.loads(sse.data)
    if sse.event == "record":
        return ThreadEvent("record", int(data["seq"]), data)
    if sse.event == "horizon":
        return ThreadEvent("horizon", None, data)
    if sse.event == "stream":
        return ThreadEvent("stream", None, data)
    return ThreadEvent("submission", None, data)


class StreamedText:
    """Folds a Thread's ``stream`` events into the text of each stream, as it grows.

    ``apply(event)`` takes any event and returns the text of the stream it is about (None for
    other events). A delta is placed at its ``offset``, so the text so far that a reconnected
    stream sends again replaces rather than repeats. ``open`` lists the streams still being
    written; a closed one's text is in its record (``seq``), an abandoned one's is dropped.
    """

    def __init__(self) -> None:
        #: The text so far of each stream being written, by stream id.
        self.open: dict[str, str] = {}

    def apply(self, event: ThreadEvent) -> str | None:
        """Take ``event``; the text of its stream after it, or None if it is no stream's."""
        if event.kind != "stream":
            return None
        stream = str(event.data["stream"])
        if event.data.get("state") != "open":
            return self.open.pop(stream, "")
        before = self.open.get(stream, "")
        offset = int(event.data.get("offset", 0))
        text = before[:offset] + str(event.data.get("text", ""))
        self.open[stream] = text
        return text


def _headers(last_seq: int | None) -> dict[str, str]:
    headers = {"accept": "text/event-stream", "cache-control": "no-cache"}
    if last_seq is not None:
        headers["last-event-id"] = str(last_seq)
    return headers


def retry_after(response: httpx.Response) -> float | None:
    """The wait a busy answer (429 or 503) asks for, in seconds, bounded by
    :data:`MAX_RETRY_AFTER_S`; None for any other answer, or one without a usable
    ``Retry-After`` (delta-seconds or an HTTP date)."""
    if response.status_code not in _BUSY:
        return None
    value = response.headers.get("retry-after", "").strip()
    if value.isascii() and value.isdigit():
        seconds = float(value)
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = max(0.0, (when - datetime.now(UTC)).total_seconds())
    return min(seconds, MAX_RETRY_AFTER_S)


@dataclass(slots=True)
class _Resume:
    """Where the stream stands, how many reconnects in a row have failed and how many busy
    answers in a row were waited out."""

    last_seq: int | None
    max_reconnects: int | None
    max_busy_retries: int = 0
    failures: int = 0
    busy: int = 0

    def headers(self) -> dict[str, str]:
        """The request headers of the next connection, resuming after the last record."""
        return _headers(self.last_seq)

    def take(self, sse: ServerSentEvent) -> ThreadEvent | None:
        """The event ``sse`` carries (None for an unknown kind), counted as received."""
        event = _event(sse)
        if event is not None:
            self.failures = 0
            if event.seq is not None:
                self.last_seq = event.seq
        return event

    def opened(self) -> None:
        """A connection was accepted: the busy answers before it are forgotten."""
        self.busy = 0

    def wait_for(self, response: httpx.Response) -> float | None:
        """How long to wait before asking again after the refusal ``response``; None when it
        is not a busy answer, or the allowance of busy answers in a row is spent."""
        delay = retry_after(response)
        if delay is None or self.busy >= self.max_busy_retries:
            return None
        self.busy += 1
        return delay

    def lost(self, error: Exception | None) -> None:
        """Count a lost connection; re-raise ``error`` once the allowance is spent."""
        self.failures += 1
        if self.max_reconnects is not None and self.failures > self.max_reconnects:
            if error is not None:
                raise error
            raise httpx.ReadError("the event stream kept ending without events")


def iter_events(
    http: httpx.Client,
    path: str,
    *,
    after: int | None,
    check: Callable[[httpx.Response], None],
    sleep: Callable[[float], None],
    reconnect_delay: float,
    max_reconnects: int | None,
    max_busy_retries: int = 0,
) -> Iterator[ThreadEvent]:
    """Yield the stream's events for ever, reconnecting after each lost connection."""
    state = _Resume(after, max_reconnects, max_busy_retries)
    while True:
        error: Exception | None = None
        busy: float | None = None
        try:
            with connect_sse(http, "GET", path, headers=state.headers()) as source:
                if source.response.status_code >= 400:
                    source.response.read()
                    busy = state.wait_for(source.response)
                    if busy is None:
                        check(source.response)
                else:
                    state.opened()
                    for sse in source.iter_sse():
                        event = state.take(sse)
                        if event is not None:
                            yield event
        except httpx.TransportError as exc:
            error = exc
        if busy is not None:
            sleep(busy)
            continue
        state.lost(error)
        sleep(reconnect_delay)


async def aiter_events(
    http: httpx.AsyncClient,
    path: str,
    *,
    after: int | None,
    check: Callable[[httpx.Response], None],
    sleep: Callable[[float], Awaitable[None]],
    reconnect_delay: float,
    max_reconnects: int | None,
    max_busy_retries: int = 0,
) -> AsyncIterator[ThreadEvent]:
    """The asynchronous twin of :func:`iter_events`."""
    state = _Resume(after, max_reconnects, max_busy_retries)
    while True:
        error: Exception | None = None
        busy: float | None = None
        try:
            async with aconnect_sse(http, "GET", path, headers=state.headers()) as source:
                if source.response.status_code >= 400:
                    await source.response.aread()
                    busy = state.wait_for(source.response)
                    if busy is None:
                        check(source.response)
                else:
                    state.opened()
                    async for sse in source.aiter_sse():
                        event = state.take(sse)
                        if event is not None:
                            yield event
        except httpx.TransportError as exc:
            error = exc
        if busy is not None:
            await sleep(busy)
            continue
        state.lost(error)
        await sleep(reconnect_delay)


__all__ = [
    "MAX_RETRY_AFTER_S",
    "EventKind",
    "StreamedText",
    "ThreadEvent",
    "aiter_events",
    "iter_events",
    "retry_after",
]
