"""A delivered batch writes one row, its cursor, however many Threads its records span."""

from __future__ import annotations

import asyncio
from itertools import pairwise

from subscribers_support import Recorder, clock, emit, log_end, writer_app

from threadline import Record
from threadline.testing import SimulatedObject
from threadline.threads.records import SUBMISSION_SETTLED


async def _rows_per_batch() -> None:
    # The log is written first, with no subscriber; a later deploy adds one that reads it
    # from the beginning in batches of 10 spanning many Threads.
    async with SimulatedObject(writer_app(), clock=clock(), check_alarm_invariant=True) as obj:
        for n in range(12):
            emit(obj, f"t{n:02d}", *[("note", {"n": n, "i": i}) for i in range(5)])
        await obj.run_alarms()
        app = writer_app()
        written_at_call: list[int] = []
        spans: list[int] = []

        @app.subscriber("sink", batch=10)
        async def sink(batch: list[Record]) -> None:
            written_at_call.append(obj.storage.meter.reading().rows_written)
            spans.append(len({record.thread_id for record in batch}))

        await obj.redeploy(app)
        before = obj.storage.meter.reading().rows_written
        await obj.run_alarms()
        after = obj.storage.meter.reading().rows_written
        # 72 records: each Thread's five and its submission's settlement record.
        assert log_end(obj) == 72
        assert len(written_at_call) == 8 and max(spans) >= 2
        # Between two calls of one wave: the previous batch's cursor row, nothing else.
        assert [b - a for a, b in pairwise(written_at_call)] == [1] * 7
        publication = obj.space.publication
        assert publication.batches == {"sink": 8} and publication.cursor_writes == {"sink": 8}
        # The whole delivery: eight cursor rows, and the publication lane made idle once.
        assert after - before <= 8 + 2


def test_a_delivered_batch_writes_one_row() -> None:
    asyncio.run(_rows_per_batch())


async def _per_record_subscriber_free() -> None:
    """Records appended while a subscriber is caught up cost the log's own rows and the
    subscriber's one cursor row per batch; nothing per record."""
    app = writer_app()
    got = Recorder()
    app.subscriber("sink", batch=100)(got)
    async with SimulatedObject(app, clock=clock()) as obj:
        await obj.run_alarms()
        emit(obj, "t", *[("note", i) for i in range(20)])
        await obj.run_alarms()
        # The twenty records and the submission's settlement record.
        assert len(got.batches) == 1 and len(got.records) == 21
        assert got.records[-1].kind == SUBMISSION_SETTLED
        assert obj.space.publication.cursor_writes == {"sink": 1}


def test_records_of_one_pass_go_in_one_batch_with_one_cursor_row() -> None:
    asyncio.run(_per_record_subscriber_free())
