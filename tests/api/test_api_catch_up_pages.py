"""Catching up on a long log reads it a bounded page at a time: the event stream sends its first
record after one page, and ``/history`` answers a page bounded by count and by bytes.

The figures (rows read and the peak of Python memory before the first record, on a Thread of
3,000 records of 20 KB) are printed: run with ``-s`` to see them.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from api_support import Api, make_api, run
from sse_support import StreamReader, call, open_stream

from threadline import Application, ManualClock, Turn
from threadline.threads.history import PAGE_BYTES, PAGE_RECORDS, append_history

RECORDS = 3_000
BODY_BYTES = 20_000


def _quiet(app: Application) -> None:
    @app.agent("quiet")
    async def quiet(turn: Turn) -> Any:
        return None


def _long_thread(clock: ManualClock, records: int = RECORDS) -> Api:
    """A Thread whose log holds ``records`` records of about 20 KB after its first settlement."""
    api = make_api(clock, _quiet)
    assert api.submit("t1", {}, agent="quiet").status == 202
    api.drive()
    body = json.dumps({"text": "x" * BODY_BYTES})

    def fill() -> None:
        for index in range(records - 1):
            append_history(api.storage, record_id=f"r{index}", thread_id="t1",
                           submission_id=None, kind="note", body_json=body,
                           now=clock.now_ms())

    api.storage.transaction(fill)
    return api


async def _first_record(api: Api) -> tuple[int, int, int]:
    """Rows read and peak Python memory from the request to the stream's first record, and
    that record's seq."""
    meter = api.storage.meter
    before = meter.reading()
    tracemalloc.start()
    try:
        reader = await open_stream(api, "t1", last_event_id="0")
        event = await reader.next()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    read = (meter.reading() - before).rows_read
    await reader.close()
    assert event.event == "record", event
    return read, peak, int(event.data["seq"])


def test_stream_catch_up_reads_one_page_before_its_first_record(clock: ManualClock) -> None:
    api = _long_thread(clock)
    rows, peak, seq = run(_first_record(api))
    print(f"\ncatch-up of {RECORDS} records of {BODY_BYTES // 1000} KB: {rows} rows read and"
          f" {peak / 1e6:.1f} MB peak before the first event")
    assert seq == 1
    # One page of records and the row past it (which says more follow), plus the one-row seek
    # that checks the resume point. The old stream read all 3,001.
    assert rows <= PAGE_RECORDS + 2, rows
    # One page of bytes, held once as rows and once as framed events, with room for the rest.
    assert peak < 4 * PAGE_BYTES + 1_000_000, peak


def test_stream_catch_up_sends_every_record_in_order_across_pages(clock: ManualClock) -> None:
    api = _long_thread(clock, records=300)

    async def go() -> list[int]:
        reader: StreamReader = await open_stream(api, "t1", after=0)
        seqs = []
        while len(seqs) < 300:
            event = await reader.next()
            if event.event == "record":
                seqs.append(int(event.data["seq"]))
        await reader.close()
        return seqs

    assert run(go()) == list(range(1, 301))


def test_history_page_is_bounded_by_bytes_and_pages_on_without_a_gap(
    clock: ManualClock,
) -> None:
    api = _long_thread(clock, records=300)

    async def page(after: int) -> dict[str, Any]:
        reply = await call(api, "GET", api.thread_path("t1") + f"/history?after={after}&limit=1000")
        assert reply.status == 200, reply.body
        data: dict[str, Any] = reply.json()
        return data

    first = run(page(0))
    size = sum(len(json.dumps(record["body"])) for record in first["records"])
    assert 1 < len(first["records"]) < 300
    assert size <= PAGE_BYTES
    assert first["next"] == first["records"][-1]["seq"]
    seqs = [record["seq"] for record in first["records"]]
    after = first["next"]
    while after is not None:
        data = run(page(after))
        seqs.extend(record["seq"] for record in data["records"])
        after = data["next"]
    assert seqs == list(range(1, 301))


def test_one_record_larger_than_a_page_is_still_read_alone(clock: ManualClock) -> None:
    api = _long_thread(clock, records=1)
    big = json.dumps({"text": "y" * (PAGE_BYTES + 10)})
    api.storage.transaction(lambda: append_history(
        api.storage, record_id="big", thread_id="t1", submission_id=None, kind="note",
        body_json=big, now=clock.now_ms()))
    reply = api.call("GET", api.thread_path("t1") + "/history?after=1&limit=10")
    assert reply.status == 200
    assert [record["seq"] for record in reply.json()["records"]] == [2]
