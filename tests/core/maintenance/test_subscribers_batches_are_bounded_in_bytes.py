"""A subscriber's batch is bounded in bytes as well as in records: 100 records of 250 KB,
each allowed, go in batches each under the bound (never one 25 MB POST), all delivered in
order; a record larger than the bound goes alone, so no batch is empty and no cursor stuck;
the bound is declared per subscriber, validated, and shown in /maintenance with what a
record too large for the destination does."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from subscribers_support import CONFIG, Recorder, clock, log_end, maintenance_view

import threadline
from threadline import Application, Record, Turn
from threadline.delivery.subscribers import DEFAULT_BATCH_BYTES, MAX_BATCH_BYTES, MIN_BATCH_BYTES
from threadline.errors import SchedulingError
from threadline.testing import SimulatedObject

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "destinations"))
from destination_support import FakeHttp, FakeQueue

RECORD_TEXT = 250_000
#: The JSON a webhook POSTs around its records: space, subscriber and the list's brackets.
POST_ENVELOPE = 200


def _big_writer() -> Application:
    """An app whose agent ``big`` emits ``input["n"]`` records of ``input["size"]`` characters."""
    app = Application(CONFIG)

    @app.agent("big")
    async def big(turn: Turn) -> dict[str, Any]:
        n, size = int(turn.input["n"]), int(turn.input["size"])
        for i in range(n):
            await turn.emit({"i": i, "text": "x" * size}, kind="note")
        return {"emitted": n}

    return app


def _json_bytes(records: list[Record]) -> int:
    return len(json.dumps([r.to_json() for r in records], separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8"))


async def _hundred_big_records_to_a_function() -> tuple[list[list[Record]], int]:
    app = _big_writer()
    recorder = Recorder()
    app.subscriber("sink", kinds={"note"})(recorder)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        obj.admit("t", "big", {"n": 100, "size": RECORD_TEXT})
        await obj.run_alarms()
        assert obj.space.publication.rows()["sink"].cursor >= log_end(obj, "note")
        return recorder.batches, log_end(obj, "note")


def test_a_hundred_records_of_250_kb_go_in_batches_each_under_the_byte_bound_in_order() -> None:
    batches, _ = asyncio.run(_hundred_big_records_to_a_function())
    sizes = [_json_bytes(batch) for batch in batches]
    assert len(batches) > 1
    assert max(sizes) <= DEFAULT_BATCH_BYTES, sizes
    # Every record, once, in log order.
    assert [r.body["i"] for batch in batches for r in batch] == list(range(100))  # type: ignore[index,call-overload]
    print(f"\n100 records of 250 KB: {len(batches)} batches, largest {max(sizes):,} bytes "
          f"(bound {DEFAULT_BATCH_BYTES:,}); one batch of {sum(sizes):,} bytes before")


async def _hundred_big_records_to_a_webhook() -> list[int]:
    app = _big_writer()
    app.webhook("crm", url="https://crm.example.com/hook", secret_env="S", kinds={"note"})
    http = FakeHttp()
    async with SimulatedObject(app, clock=clock(), env={"S": "secret"}, http=http,
                               check_alarm_invariant=True) as obj:
        obj.admit("t", "big", {"n": 100, "size": RECORD_TEXT})
        await obj.run_alarms()
        seqs = [record["body"]["i"] for sent in http.sent
                for record in json.loads(sent.body)["records"]]
        assert seqs == list(range(100))
        return [len(sent.body) for sent in http.sent]


def test_a_webhook_posts_a_hundred_records_of_250_kb_in_bodies_under_the_byte_bound() -> None:
    sizes = asyncio.run(_hundred_big_records_to_a_webhook())
    assert len(sizes) > 1
    assert max(sizes) <= DEFAULT_BATCH_BYTES + POST_ENVELOPE, sizes


async def _larger_than_the_bound(batch_bytes: int) -> tuple[list[list[Record]], int, int]:
    app = _big_writer()
    recorder = Recorder()
    app.subscriber("sink", batch_bytes=batch_bytes)(recorder)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        obj.admit("t", "big", {"n": 5, "size": 3 * batch_bytes})
        await obj.run_alarms()
        return recorder.batches, obj.space.publication.rows()["sink"].cursor, log_end(obj)


def test_a_record_larger_than_the_byte_bound_goes_alone_and_the_cursor_moves_past_it() -> None:
    batches, cursor, end = asyncio.run(_larger_than_the_bound(MIN_BATCH_BYTES))
    notes = [batch for batch in batches if batch[0].kind == "note"]
    assert [len(batch) for batch in notes] == [1] * 5
    assert all(batches)  # never an empty batch
    assert cursor == end  # and the settlement record after them is delivered too


async def _queue_of_big_records() -> list[list[Any]]:
    app = _big_writer()
    app.queue("audit", binding="EVENTS", kinds={"note"}, batch_bytes=200_000)
    queue = FakeQueue()
    async with SimulatedObject(app, clock=clock(), env={"EVENTS": queue}) as obj:
        obj.admit("t", "big", {"n": 20, "size": 50_000})
        await obj.run_alarms()
    return queue.calls


def test_a_queue_batch_is_bounded_by_its_declared_bytes() -> None:
    calls = asyncio.run(_queue_of_big_records())
    # Three records of 50 KB fit under 200,000 bytes, a fourth would not.
    assert [len(call) for call in calls] == [3] * 6 + [2]
    assert [body["record"]["body"]["i"] for call in calls for body in call] == list(range(20))


@pytest.mark.parametrize("batch_bytes", [0, MIN_BATCH_BYTES - 1, MAX_BATCH_BYTES + 1, True,
                                         1.5, "1000000", None])
def test_a_batch_bytes_out_of_bounds_is_refused_at_declaration(batch_bytes: Any) -> None:
    app = threadline.Application()
    with pytest.raises(SchedulingError, match="batch_bytes"):
        app.webhook("crm", url="https://crm.example.com/hook", secret_env="S",
                    batch_bytes=batch_bytes)
    with pytest.raises(SchedulingError, match="batch_bytes"):
        app.queue("audit", batch_bytes=batch_bytes)
    with pytest.raises(SchedulingError, match="batch_bytes"):
        app.subscriber("sink", batch_bytes=batch_bytes)
    with pytest.raises(SchedulingError, match="batch_bytes"):
        app.on_settled(name="settled", batch_bytes=batch_bytes)(lambda batch: None)


def test_the_default_byte_bound_is_well_inside_the_objects_memory() -> None:
    # 128 MB is the object's memory; a batch is held as rows, records and its JSON at once.
    assert DEFAULT_BATCH_BYTES * 8 <= 128 * 1024 * 1024 // 4


async def _readout() -> dict[str, dict[str, Any]]:
    app = _big_writer()
    app.webhook("crm", url="https://crm.example.com/hook", secret_env="S", batch_bytes=500_000)
    app.queue("audit", binding="EVENTS")
    app.subscriber("sink")(Recorder())
    async with SimulatedObject(app, clock=clock(), env={"S": "s", "EVENTS": FakeQueue()}) as obj:
        view = await maintenance_view(obj)
    return {item["name"]: item for item in view["subscribers"]}


def test_maintenance_shows_each_byte_bound_and_what_a_record_too_large_does() -> None:
    view = asyncio.run(_readout())
    assert view["crm"]["batch_bytes"] == 500_000
    assert view["audit"]["batch_bytes"] == view["sink"]["batch_bytes"] == DEFAULT_BATCH_BYTES
    assert "alone" in view["crm"]["oversize"] and "413" in view["crm"]["oversize"]
    assert "128 KB" in view["audit"]["oversize"] and "parks" in view["audit"]["oversize"]
    assert "alone" in view["sink"]["oversize"]


async def _large_unwanted_records_first() -> tuple[list[list[Record]], int, int]:
    app = _big_writer()

    @app.agent("small")
    async def small(turn: Turn) -> None:
        for i in range(3):
            await turn.emit({"i": i}, kind="wanted")

    recorder = Recorder()
    app.subscriber("sink", kinds={"wanted"}, batch_bytes=MIN_BATCH_BYTES)(recorder)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        obj.admit("t", "big", {"n": 4, "size": 5 * MIN_BATCH_BYTES})
        obj.admit("t", "small", None)
        await obj.run_alarms()
        return (recorder.batches, obj.space.publication.rows()["sink"].cursor,
                log_end(obj, "wanted"))


def test_records_it_does_not_want_larger_than_the_bound_are_stepped_over_not_stuck_on() -> None:
    batches, cursor, last_wanted = asyncio.run(_large_unwanted_records_first())
    assert [r.body for batch in batches for r in batch] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert all(batches)
    assert cursor >= last_wanted
