"""A subscriber gets every record of every Thread, in log order within each Thread, in
batches of at most ``batch``; a kinds filter passes only those kinds."""

from __future__ import annotations

import asyncio

from subscribers_support import Recorder, clock, emit, log_end, row, writer_app

from threadline.testing import SimulatedObject
from threadline.threads.records import SUBMISSION_SETTLED


async def _ordered() -> None:
    app = writer_app()
    got = Recorder()
    app.subscriber("all", batch=3)(got)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        for round_ in range(3):
            for thread in ("a", "b", "c"):
                emit(obj, thread, *[("note", {"n": round_, "i": i}) for i in range(2)])
        await obj.run_alarms()
        # Each submission's two records, then its settlement record.
        assert got.per_thread() == {thread: list(range(1, 10)) for thread in ("a", "b", "c")}
        assert {r.seq for r in got.records if r.kind == SUBMISSION_SETTLED} == {3, 6, 9}
        assert all(len(batch) <= 3 for batch in got.batches)
        assert len({record.record_id for record in got.records}) == 27
        stored = row(obj, "all")
        assert stored is not None and stored.cursor == log_end(obj) == 27
        assert stored.failures == 0
        assert obj.alarm_at is None


def test_records_are_delivered_in_log_order_per_thread() -> None:
    asyncio.run(_ordered())


async def _kinds() -> None:
    app = writer_app()
    settled = Recorder()
    app.subscriber("only-orders", kinds={"order"})(settled)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1), ("order", 2), ("note", 3), ("order", 4))
        await obj.run_alarms()
        assert [(r.kind, r.body, r.seq) for r in settled.records] == [
            ("order", 2, 2), ("order", 4, 4)]


def test_a_kinds_filter_delivers_only_those_kinds() -> None:
    asyncio.run(_kinds())
