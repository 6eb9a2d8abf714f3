"""``GET .../threads/{thread}/events``: a Thread's live event stream (Server-Sent Events).

Two kinds of events, chosen so that resuming is exact:

- ``event: record`` — one record of the Thread's log, with ``id:`` set to its seq. The log
  holds what agents emit and the runtime's own facts (``submission.settled`` with the outcome
  and the result or error, ``approval.requested``, ``approval.decided``, ``message.failed``: see
  :mod:`threadline.threads.records`). The stream sends every record after the resume point in seq
  order, then each new one as it is appended. A client that reconnects with
  ``Last-Event-ID: N`` (or ``?after=N`` on a fresh connection; the header wins when both are
  sent, as a reconnecting browser keeps the URL) gets exactly the records after ``N``: no gap,
  no duplicate. So it learns every settlement it missed while disconnected, even of a
  submission admitted and settled in between, from the ``submission.settled`` records.
- ``event: horizon`` — the records after the resume point up to ``first_kept - 1`` were
  deleted by retention (``RuntimeConfig.retention_ms``): ``{"after", "first_kept"}``, sent
  right before the record ``first_kept``. It carries no ``id:``; the records that follow do.
- ``event: stream`` — text an agent streams (``turn.stream``), as it is written: ``{"stream",
  "kind", "submission_id", "state"}`` plus, while ``open``, ``offset`` (characters of the text
  before this delta) and ``text`` (the delta); the first event of a stream on a connection
  has offset 0 and all the text so far, so a client that connects or reconnects mid-stream
  starts from what was written. It ends with ``closed`` (``seq``: the record holding the whole
  text, sent before it) or ``abandoned`` (the Attempt's try ended without it; nothing of it is
  stored, and a retry streams under a new id). No ``id:``, like ``submission``: a stream lives
  in the object's memory only, and a client that resumes gets the record once it is written.
  Deltas written between two wakes of a connection go out as one event.
- ``event: submission`` — a submission's state changed (admitted, started, suspended, settled,
  ...). It carries NO ``id:`` field, so it never moves the client's Last-Event-ID (the SSE
  rule: an event without an id keeps the last one). These are live notifications, sampled:
  each connection starts with the current state of the Thread's open submissions, then sends
  each change it observes. A change that happened while no connection was open is not
  replayed, and two changes between two reads show as one; what a client must not miss is a
  record (a settlement is one).

Each open stream holds a slot of the object (:mod:`threadline.api.stream_slots`): beyond
``max_event_streams`` per object, or ``max_event_streams_per_subject`` under one principal's
stream key, a new stream is refused (503 / 429, with ``Retry-After``) before anything is read.

The route opens on a Thread with no submission yet (a Thread exists for reading once it is
named; opening writes nothing): the stream waits, and the first submission admitted to it is
announced and its records follow like any other.

A backlog is caught up a page at a time (:func:`threadline.threads.history.read_history_page`:
at most ``PAGE_RECORDS`` records and ``PAGE_BYTES`` of bodies): each page is sent before the
next is read, so the first record leaves after one page however long the log, and the stream
holds one page in memory. The state snapshot follows the backlog.

An idle stream sends the comment ``: keep-alive`` every ``sse_heartbeat_ms``. The stream waits
on the gate's in-process change notifications; each wake reads only the records after the last
one it sent and the Thread's open submissions (one indexed read each).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from threadline.access import STREAM_KEY_HEADER
from threadline.api.body import read_query
from threadline.api.context import ApiContext
from threadline.api.http import Request, Response
from threadline.api.models import MAX_SAFE_INTEGER, EventsQuery
from threadline.api.problems import InvalidHeader, typed_problem
from threadline.api.stream_slots import Refusal, SlotStream, retry_after_s
from threadline.errors import NotFound, ValidationFailed
from threadline.threads import history, views
from threadline.threads.live_text import LiveState
from threadline.threads.model import decode_json

EVENT_STREAM = "text/event-stream"
STREAM_DESCRIPTION = (
    "Server-Sent Events. `event: record` carries one record of the Thread's log as JSON "
    "(`seq`, `record_id`, `submission_id`, `kind`, `body`, `created_at`) with `id:` set to its "
    "seq: what agents emit, and the runtime's own facts under reserved kinds "
    "(`submission.settled`: `{submission_id, outcome, result?, error?, submitted_by?, "
    "message_from?, aborted_by?, resolved_by?}`; `approval.requested`: "
    "`{submission_id, key, payload}`; "
    "`approval.decided`: `{submission_id, key, approved, decided_by?}`; `message.failed`; the "
    "`*_by` members name the subjects of the principals that caused the fact, when known). "
    "The stream first "
    "sends every record after the resume point, a page at a time (100 records or about 1 MiB "
    "of bodies, each page sent before the next is read), then each new one as it is appended. "
    "Resume with `Last-Event-ID: <seq>` (or `?after=<seq>`; the header wins): exactly the records "
    "after that seq follow, no gap and no duplicate, so every settlement missed while "
    "disconnected arrives as its `submission.settled` record. "
    "`event: horizon` (no `id:`), `{after, first_kept}`: the records after the resume point "
    "up to `first_kept - 1` were deleted by retention (`retention_ms`); it comes right before "
    "the record `first_kept`, so a resume from before the kept records is never a silent gap. "
    "`event: stream` (no `id:`) carries text an agent streams, as written: "
    "`{stream, kind, submission_id, state}`, with `offset` and `text` (the delta) while "
    "`open` (a connection's first event of a stream has offset 0 and the text so far); it ends "
    "`closed` with the `seq` of the record holding the whole text (sent before it), or "
    "`abandoned` (nothing was stored; a retry streams under a new id). "
    "`event: submission` carries a submission's state (`id`, `seq`, `state`, `outcome`, "
    "`attempts`, `revision`) WITHOUT an `id:` field, so it never moves Last-Event-ID: each "
    "connection opens with the current state of the open submissions, then sends each change "
    "it observes; changes made while disconnected are not replayed. The stream opens on a "
    "Thread with no submission yet and waits for its first one. An idle stream sends the "
    "comment `: keep-alive` every `sse_heartbeat_ms` (15 s by default). "
    "A space serves at most `max_event_streams` streams at once and one principal at most "
    "`max_event_streams_per_subject` of them: beyond, 503 `streams-exhausted` or 429 "
    "`too-many-streams`, both with `Retry-After` (seconds)."
)
RECORD_EVENT = "record"
STREAM_EVENT = "stream"
SUBMISSION_EVENT = "submission"
HORIZON_EVENT = "horizon"
HEARTBEAT = b": keep-alive\n\n"
#: The state snapshot follows at most this many open submissions (the head first).
OPEN_FOLLOWED = 100


def frame(event: str, data: Any, event_id: int | None = None) -> bytes:
    """One SSE event: ``data`` as a single line of compact JSON."""
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {text}\n\n".encode()


def resume_point(request: Request) -> int:
    """The seq after which to start: ``Last-Event-ID`` if sent, else ``?after=``, else 0."""
    query = read_query(request, EventsQuery)
    header = request.header("last-event-id")
    if header is None:
        return query.after
    value = header.strip()
    if not value.isascii() or not value.isdigit() or int(value) > MAX_SAFE_INTEGER:
        raise InvalidHeader(
            f"must be a history seq (an integer from 0 to {MAX_SAFE_INTEGER})",
            field="Last-Event-ID",
        )
    return int(value)


def _record(row: dict[str, object]) -> bytes:
    seq = int(str(row["seq"]))
    data = {
        "seq": seq, "record_id": row["record_id"], "submission_id": row["submission_id"],
        "kind": row["kind"], "body": decode_json(str(row["body_json"])),
        "created_at": row["created_at"],
    }
    return frame(RECORD_EVENT, data, seq)


def _state(submission_id: str, seq: int, state: str, revision: int, attempts: int,
           outcome: str | None) -> bytes:
    return frame(SUBMISSION_EVENT, {
        "id": submission_id, "seq": seq, "state": state, "outcome": outcome,
        "attempts": attempts, "revision": revision,
    })


class _Follower:
    """What one stream has sent so far: the last record seq and each submission's revision."""

    def __init__(self, ctx: ApiContext, thread_id: str, after: int) -> None:
        self.ctx = ctx
        self.thread_id = thread_id
        self.last_seq = after
        self.seen: dict[str, int] = {}
        #: Characters of each live stream this connection has sent.
        self.sent: dict[str, int] = {}

    def records(self) -> tuple[list[bytes], bool]:
        """The next page of records after the last one sent, in seq order, and whether more
        follow it (the stream sends this page before it reads the next)."""
        page = history.read_history_page(self.ctx.storage, self.thread_id, after=self.last_seq)
        out: list[bytes] = []
        if page.rows and int(str(page.rows[0]["seq"])) > self.last_seq + 1:
            # Seqs have no hole but the prefix retention deleted: say where the kept ones
            # start rather than skip the deleted ones in silence.
            out.append(frame(HORIZON_EVENT, {
                "after": self.last_seq, "first_kept": int(str(page.rows[0]["seq"]))}))
        for row in page.rows:
            out.append(_record(row))
            self.last_seq = int(str(row["seq"]))
        return out, page.more

    def streams(self) -> list[bytes]:
        """What the Thread's live streams wrote since this connection last looked: one event
        per stream with its new text, and the end of each stream it followed (a closed one's
        only once its record went out). Memory only: no storage read."""
        out: list[bytes] = []
        for entry in self.ctx.live.snapshot(self.thread_id):
            head = {"stream": entry.id, "kind": entry.kind, "submission_id": entry.submission_id}
            if entry.state is LiveState.OPEN:
                sent = self.sent.get(entry.id)
                text = entry.text()
                if sent is None or len(text) > sent:
                    offset = sent or 0
                    out.append(frame(STREAM_EVENT, {**head, "state": "open", "offset": offset,
                                                    "text": text[offset:]}))
                    self.sent[entry.id] = len(text)
                continue
            if entry.id not in self.sent:
                continue  # never followed here: a closed one's record says it all
            if entry.state is LiveState.CLOSED and (entry.seq or 0) > self.last_seq:
                continue  # its record first
            del self.sent[entry.id]
            end: dict[str, Any] = {**head, "state": entry.state.value, "length": entry.length}
            if entry.seq is not None:
                end["seq"] = entry.seq
            out.append(frame(STREAM_EVENT, end))
        return out

    def states(self) -> list[bytes]:
        """A ``submission`` event for each submission whose revision moved since last sent."""
        out: list[bytes] = []
        current = views.open_submissions(self.ctx.storage, self.thread_id, limit=OPEN_FOLLOWED)
        still_open = set()
        for item in current:
            still_open.add(item.submission_id)
            if self.seen.get(item.submission_id) != item.revision:
                self.seen[item.submission_id] = item.revision
                out.append(_state(item.submission_id, item.seq, item.state.value,
                                  item.revision, item.attempts, None))
        # A followed submission that left the open set has settled: say how, once.
        for submission_id in sorted(set(self.seen) - still_open):
            del self.seen[submission_id]
            try:
                gone = self.ctx.ledger.get(submission_id)
            except NotFound:
                continue  # settled long ago and deleted by retention since: nothing to say
            outcome = gone.outcome.value if gone.outcome is not None else None
            out.append(_state(gone.id, gone.seq, gone.state.value, gone.revision,
                              gone.attempts, outcome))
        return out


async def stream(ctx: ApiContext, thread_id: str, after: int) -> AsyncIterator[bytes]:
    """The event stream of ``thread_id`` from ``after``; runs until the consumer closes it."""
    subscription = ctx.subscribers.open(ctx.changes, ctx.clock)
    follower = _Follower(ctx, thread_id, after)
    interval = ctx.config.sse_heartbeat_ms
    try:
        heartbeat_at = ctx.clock.now_ms() + interval
        # The feed's revision at the last read of the log: a wake by deltas alone reads no
        # storage, but any commit since that read (even one made while the wait was being
        # torn down) is read at the next turn.
        read_at: int | None = None
        more = False
        while True:
            # Both taken before reading: a commit or a delta after the read moves them, so
            # the wait returns.
            revision = subscription.revision
            written = ctx.live.version(thread_id)
            chunks: list[bytes] = []
            if more or revision != read_at:
                read_at = revision
                chunks, more = follower.records()
                if not more:
                    chunks += follower.states()
            if not more:
                chunks += follower.streams()
            for chunk in chunks:
                yield chunk
            if chunks:
                heartbeat_at = ctx.clock.now_ms() + interval
            if more:
                # Catching up: the next page is read once this one has been taken.
                continue
            stored, streamed = await subscription.wait_either(
                revision, heartbeat_at, ctx.live.changed(thread_id, written))
            if not stored and not streamed:
                yield HEARTBEAT
                heartbeat_at = ctx.clock.now_ms() + interval
    finally:
        subscription.close()


async def events(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``GET .../threads/{thread}/events``: the Thread's records and state changes, live."""
    after = resume_point(request)
    thread_id = params["thread"]
    # Counted before the read below, so that a refusal under load costs no storage read; a
    # request refused afterwards gives its slot back at once.
    slot = ctx.streams.take(request.header(STREAM_KEY_HEADER), ctx.config)
    if isinstance(slot, Refusal):
        return typed_problem(
            slot.slug, slot.detail, headers={"retry-after": str(retry_after_s(ctx.config))})
    try:
        # A Thread exists for reading once it is named: before its first admission the
        # stream opens on an empty history and waits, so a client can subscribe before it
        # submits.
        last_seq = history.last_history_seq(ctx.storage, thread_id)
        if after > last_seq:
            # A seq this object never handed out: resuming there would skip records to come.
            detail = f"{after} is past the Thread's last record ({last_seq})"
            if request.header("last-event-id") is not None:
                raise InvalidHeader(detail, field="Last-Event-ID")
            raise ValidationFailed(detail, field="after")
    except BaseException:
        slot.release()
        raise
    headers = {
        "content-type": EVENT_STREAM,
        "cache-control": "no-cache",
        # Asks buffering proxies (nginx and alike) to pass each event through at once.
        "x-accel-buffering": "no",
    }
    live = ctx.revocations.cut_when_revoked(request, stream(ctx, thread_id, after))
    return Response(200, headers, stream=SlotStream(live, slot))


__all__ = [
    "EVENT_STREAM",
    "HEARTBEAT",
    "HORIZON_EVENT",
    "RECORD_EVENT",
    "STREAM_DESCRIPTION",
    "STREAM_EVENT",
    "SUBMISSION_EVENT",
    "events",
    "frame",
    "resume_point",
    "stream",
]
