"""The live event stream of a Thread: records by seq, state changes, resume, heartbeat, close."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api, make_api, run
from sse_support import (
    Event,
    StreamReader,
    call,
    drive,
    open_stream,
    pending,
    soon,
    submit,
    turns,
)

from threadline import Application, ManualClock, Turn


def _chatty(app: Application) -> None:
    @app.agent("chatty")
    async def chatty(turn: Turn) -> Any:
        for index in range(int(turn.input["count"])):
            await turn.emit({"n": index})
        return {"said": turn.input["count"]}


@pytest.fixture
def chat(clock: ManualClock) -> Api:
    return make_api(clock, _chatty)


def _records(events: list[Event]) -> list[Event]:
    return [e for e in events if e.event == "record"]


async def _until_record(reader: StreamReader) -> tuple[Event, list[Event]]:
    """The next record, and the submission events read before it."""
    states: list[Event] = []
    while True:
        event = await reader.next()
        if event.event == "record":
            return event, states
        states.append(event)


async def _settled_record(reader: StreamReader) -> Event:
    """The next record, which must be a settlement."""
    record, _ = await _until_record(reader)
    assert record.data["kind"] == "submission.settled", record
    assert record.data["record_id"] == f"{record.data['submission_id']}:settled"
    return record


def test_records_arrive_in_seq_order_then_live(chat: Api) -> None:
    async def go() -> None:
        await submit(chat, "t1", {"count": 3}, agent="chatty")
        await drive(chat)
        reader = await open_stream(chat, "t1")
        backlog = [await _until_record(reader) for _ in range(3)]
        assert [r.id for r, _ in backlog] == [1, 2, 3]
        assert [r.data["body"] for r, _ in backlog] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert backlog[0][0].data["seq"] == 1 and backlog[0][0].data["kind"] == "record"
        # Its settlement is the next record of the log.
        first_settled = await _settled_record(reader)
        assert first_settled.id == 4 and first_settled.data["body"]["result"] == {"said": 3}
        # Nothing open: the opening snapshot of submission states is empty.
        waiting = await pending(reader)
        assert not waiting.done()
        second = await submit(chat, "t1", {"count": 2}, agent="chatty")
        admitted = await soon(waiting)
        assert admitted.event == "submission" and admitted.id is None
        assert admitted.data["id"] == second["id"] and admitted.data["state"] == "queued"
        await drive(chat)
        live = [await _until_record(reader) for _ in range(2)]
        assert [r.id for r, _ in live] == [5, 6]
        assert (await _settled_record(reader)).id == 7
        settled = await reader.next()
        assert settled.event == "submission" and settled.id is None
        assert settled.data == {
            "id": second["id"], "seq": 2, "state": "settled", "outcome": "completed",
            "attempts": 1, "revision": settled.data["revision"],
        }
        await reader.close()

    run(go())


def test_state_changes_of_an_approval_flow(api: Api) -> None:
    async def go() -> None:
        sub = await submit(api, "t1", {"text": "hi"}, agent="confirm")
        await drive(api)
        reader = await open_stream(api, "t1")
        # The log first: the approval request, a record like any other.
        asked = await reader.next()
        assert (asked.event, asked.id, asked.data["kind"]) == ("record", 1, "approval.requested")
        assert asked.data["body"] == {"submission_id": sub["id"], "key": "confirm",
                                      "payload": asked.data["body"]["payload"]}
        opening = await reader.next()
        assert opening.data["state"] == "suspended" and opening.id is None
        decided = await call(api, "POST", api.submission_path("t1", sub["id"])
                             + "/approvals/confirm", {"approved": True})
        assert decided.status == 200
        # The decision is logged with it, before the state it leads to.
        logged = await reader.next()
        assert (logged.event, logged.id, logged.data["kind"]) == (
            "record", 2, "approval.decided")
        woken = await reader.next()
        assert woken.data["state"] == "ready"
        await drive(api)
        seen = [await reader.next()]
        while seen[-1].data.get("state") != "settled":
            seen.append(await reader.next())
        # The record comes before the settlement it preceded; states between two reads of
        # the stream (running) may be coalesced into the latest one.
        assert [(e.id, e.data["kind"]) for e in seen if e.event == "record"] == [
            (3, "record"), (4, "submission.settled")]
        assert seen[0].event == "record"
        assert seen[-1].data["outcome"] == "completed"
        await reader.close()

    run(go())


def test_resume_with_last_event_id_has_no_gap_and_no_duplicate(chat: Api) -> None:
    async def go() -> None:
        await submit(chat, "t1", {"count": 4}, agent="chatty")
        await drive(chat)
        first = await open_stream(chat, "t1")
        got = [(await _until_record(first))[0] for _ in range(2)]
        await first.close()
        # While disconnected, more records are appended.
        await submit(chat, "t1", {"count": 3}, agent="chatty")
        await drive(chat)
        again = await open_stream(chat, "t1", after=0, last_event_id=str(got[-1].id))
        rest = [(await _until_record(again))[0] for _ in range(7)]
        tail = await pending(again)
        assert not tail.done()
        seqs = [e.id for e in got + rest]
        assert seqs == list(range(1, 10))
        assert len({e.data["record_id"] for e in got + rest}) == 9
        tail.cancel()
        await turns()
        await again.close()
        # ?after= starts a fresh connection at the same place.
        fresh = await open_stream(chat, "t1", after=6)
        assert (await _until_record(fresh))[0].id == 7
        await fresh.close()

    run(go())


def test_a_submission_admitted_and_settled_while_disconnected_is_learned_on_resume(
    chat: Api,
) -> None:
    async def go() -> None:
        first = await submit(chat, "t1", {"count": 1}, agent="chatty")
        await drive(chat)
        reader = await open_stream(chat, "t1")
        seen = [(await _until_record(reader))[0], await _settled_record(reader)]
        await reader.close()
        # While no stream is open: one submission that emits nothing and one that emits
        # twice, both admitted and settled before the client comes back.
        quiet = await submit(chat, "t1", {"count": 0}, agent="chatty")
        loud = await submit(chat, "t1", {"count": 2}, agent="chatty")
        await drive(chat)
        again = await open_stream(chat, "t1", last_event_id=str(seen[-1].id))
        rest = [(await _until_record(again))[0] for _ in range(4)]
        tail = await pending(again)
        assert not tail.done()
        log = [(e.id, e.data["submission_id"], e.data["kind"]) for e in seen + rest]
        assert log == [
            (1, first["id"], "record"), (2, first["id"], "submission.settled"),
            (3, quiet["id"], "submission.settled"),
            (4, loud["id"], "record"), (5, loud["id"], "record"),
            (6, loud["id"], "submission.settled"),
        ]
        # The settlement says how: outcome and result, as the submission route would.
        assert rest[0].data["body"] == {"submission_id": quiet["id"], "outcome": "completed",
                                        "result": {"said": 0}}
        assert len({e.data["record_id"] for e in seen + rest}) == 6
        tail.cancel()
        await turns()
        await again.close()

    run(go())


def test_heartbeat_follows_the_injected_clock(chat: Api, clock: ManualClock) -> None:
    interval = chat.app.config.sse_heartbeat_ms

    async def go() -> None:
        await submit(chat, "t1", {"count": 1}, agent="chatty")
        await drive(chat)
        reader = await open_stream(chat, "t1")
        await _until_record(reader)
        await _settled_record(reader)
        waiting = await pending(reader)
        clock.advance(interval - 1)
        await turns()
        assert not waiting.done()
        clock.advance(1)
        await turns()
        assert waiting.done()
        beat = await waiting
        assert beat.comment == "keep-alive" and beat.event is None and beat.id is None
        # The next one is a whole interval later again.
        waiting = await pending(reader)
        clock.advance(interval - 1)
        await turns()
        assert not waiting.done()
        clock.advance(1)
        await turns()
        assert waiting.done() and (await waiting).comment == "keep-alive"
        await reader.close()

    run(go())


def test_closing_the_stream_frees_its_subscriber_and_timer(chat: Api, clock: ManualClock) -> None:
    subscribers = chat.space.api.subscribers

    async def go() -> None:
        await submit(chat, "t1", {"count": 1}, agent="chatty")
        await drive(chat)
        readers = [await open_stream(chat, "t1") for _ in range(2)]
        for reader in readers:
            await _until_record(reader)
            await _settled_record(reader)
        assert len(subscribers) == 2
        # The first waits for news (its heartbeat timer is set); the second is between reads.
        waiting = await pending(readers[0])
        assert clock.next_deadline() is not None
        await readers[1].close()
        assert len(subscribers) == 1
        # A read given up (the platform cancels it when the client leaves) ends the stream.
        waiting.cancel()
        await turns()
        assert len(subscribers) == 0
        assert clock.next_deadline() is None
        await readers[0].close()

    run(go())


def test_an_idle_stream_reads_nothing_and_a_wake_reads_only_new_records(chat: Api) -> None:
    meter = chat.storage.meter

    async def go() -> None:
        await submit(chat, "t1", {"count": 250}, agent="chatty")
        await drive(chat)
        reader = await open_stream(chat, "t1")
        for _ in range(250):
            await _until_record(reader)
        await _settled_record(reader)
        waiting = await pending(reader)
        idle = meter.reading()
        await turns(200)
        assert (meter.reading() - idle).rows_read == 0
        assert not waiting.done()
        # A commit elsewhere in the object wakes the stream; it reads past seq 251 only.
        before = meter.reading()
        await submit(chat, "t2", {"count": 1}, agent="chatty")
        admitted = meter.reading() - before
        await turns()
        woke = meter.reading() - before
        assert not waiting.done()
        # Two reads (records after 251, open submissions), and no row comes back: nothing new.
        assert woke.statements - admitted.statements == 2
        assert woke.rows_read == admitted.rows_read
        waiting.cancel()
        await turns()
        await reader.close()

    run(go())


def test_a_stream_opened_before_the_first_submission_writes_nothing_then_delivers_it(
    chat: Api,
) -> None:
    meter = chat.storage.meter

    async def go() -> None:
        before_dump = chat.dump()
        before = meter.reading()
        reader = await open_stream(chat, "fresh")
        waiting = await pending(reader)
        opened = meter.reading() - before
        # Named is enough to read: no Thread row, no subscriber row, nothing written.
        assert opened.rows_written == 0
        assert chat.dump() == before_dump
        assert not waiting.done()
        assert len(chat.space.api.subscribers) == 1
        first = await submit(chat, "fresh", {"count": 2}, agent="chatty")
        admitted = await soon(waiting)
        assert admitted.event == "submission" and admitted.id is None
        assert admitted.data["id"] == first["id"] and admitted.data["state"] == "queued"
        await drive(chat)
        live = [await _until_record(reader) for _ in range(2)]
        assert [r.id for r, _ in live] == [1, 2]
        assert [r.data["body"] for r, _ in live] == [{"n": 0}, {"n": 1}]
        assert all(r.data["submission_id"] == first["id"] for r, _ in live)
        assert (await _settled_record(reader)).id == 3
        settled = await reader.next()
        assert settled.data["id"] == first["id"] and settled.data["state"] == "settled"
        assert settled.data["outcome"] == "completed"
        await reader.close()
        assert len(chat.space.api.subscribers) == 0

    run(go())


def test_a_stream_before_the_first_submission_sends_heartbeats(
    chat: Api, clock: ManualClock,
) -> None:
    async def go() -> None:
        reader = await open_stream(chat, "quiet")
        waiting = await pending(reader)
        clock.advance(chat.app.config.sse_heartbeat_ms)
        await turns()
        assert waiting.done() and (await waiting).comment == "keep-alive"
        await reader.close()

    run(go())


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", " ", "9007199254740992", "٣", "99"])
def test_a_bad_last_event_id_is_a_400_and_writes_nothing(chat: Api, value: str) -> None:
    run(submit(chat, "t1", {"count": 1}, agent="chatty"))
    chat.drive()
    before = chat.dump()
    reply = chat.call("GET", chat.thread_path("t1") + "/events",
                      headers={"Last-Event-ID": value})
    assert reply.status == 400, reply.body
    problem = reply.json()
    assert problem["type"] == "urn:threadline:problem:invalid-header"
    assert problem["field"] == "Last-Event-ID"
    assert reply.stream is None
    assert chat.dump() == before
    assert len(chat.space.api.subscribers) == 0


def test_other_refusals(chat: Api) -> None:
    run(submit(chat, "t1", {"count": 1}, agent="chatty"))
    chat.drive()
    for query in ("after=x", "after=-1", "after=5"):
        bad = chat.call("GET", chat.thread_path("t1") + "/events?" + query)
        assert bad.status == 422, (query, bad.body)
        assert bad.json()["field"] == "after"
    # A Thread with no record yet has handed out no seq to resume after.
    fresh = chat.call("GET", chat.thread_path("fresh") + "/events?after=1")
    assert fresh.status == 422 and fresh.json()["field"] == "after"
    header = chat.call("GET", chat.thread_path("fresh") + "/events",
                       headers={"Last-Event-ID": "1"})
    assert header.status == 400 and header.json()["field"] == "Last-Event-ID"
    post = chat.call("POST", chat.thread_path("t1") + "/events", {})
    assert post.status == 405 and post.headers["allow"] == "GET, HEAD"


def test_the_stream_tells_caches_and_buffering_proxies_to_pass_each_event_through(
    chat: Api,
) -> None:
    """Compared as HTTP does: header names, and these directives, case-insensitively."""

    async def go() -> None:
        reply = await call(chat, "GET", chat.thread_path("t1") + "/events")
        assert reply.status == 200 and reply.stream is not None
        headers = {name.lower(): value.lower() for name, value in reply.headers.items()}
        assert headers["cache-control"] == "no-cache"
        assert headers["x-accel-buffering"] == "no"
        await reply.stream.aclose()  # type: ignore[attr-defined]

    run(go())


def test_head_answers_without_opening_a_subscription(chat: Api) -> None:
    run(submit(chat, "t1", {"count": 1}, agent="chatty"))
    reply = chat.call("HEAD", chat.thread_path("t1") + "/events")
    assert reply.status == 200 and reply.headers["content-type"] == "text/event-stream"
    assert reply.stream is None and reply.body == b""
    assert len(chat.space.api.subscribers) == 0


def test_the_route_is_documented_as_an_event_stream(api: Api) -> None:
    document = api.call("GET", "/v1/openapi.json").json()
    operation = document["paths"]["/v1/spaces/{space}/threads/{thread}/events"]["get"]
    assert operation["operationId"] == "streamEvents"
    assert list(operation["responses"]["200"]["content"]) == ["text/event-stream"]
    assert "Last-Event-ID" in operation["description"]
    parameters = {(p["in"], p["name"]) for p in operation["parameters"]}
    assert parameters == {("query", "after"), ("header", "Last-Event-ID")}
    assert {"400", "404", "422"} <= set(operation["responses"])


def test_a_record_with_line_breaks_stays_one_event(api: Api) -> None:
    async def go() -> None:
        await submit(api, "t1", {"text": "line\n\ndata: forged\n\nid: 99"}, agent="echo")
        await drive(api)
        reader = await open_stream(api, "t1")
        record, _ = await _until_record(reader)
        assert record.id == 1
        assert record.data["body"]["text"] == "line\n\ndata: forged\n\nid: 99"
        await reader.close()

    run(go())
