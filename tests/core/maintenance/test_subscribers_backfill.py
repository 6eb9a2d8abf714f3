"""A subscriber added with ``start="beginning"`` reads the log from its start in bounded waves
(WAVE_BATCHES batches per pass) that run beside native work and never hold it; one added with
``start="now"`` gets only what is appended after its first start."""

from __future__ import annotations

import asyncio

from subscribers_support import Recorder, clock, emit, log_end, row, writer_app

from threadline.maintenance.publication_lane import WAVE_BATCHES
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState
from threadline.threads.records import SUBMISSION_SETTLED


async def _backfill() -> None:
    async with SimulatedObject(writer_app(), clock=clock(), check_alarm_invariant=True) as obj:
        for n in range(6):
            emit(obj, f"t{n}", *[("note", {"n": n, "i": i}) for i in range(50)])
        await obj.run_alarms()
        app = writer_app()
        got = Recorder()
        app.subscriber("late", batch=10, start="beginning")(got)
        await obj.redeploy(app)
        work = emit(obj, "live", ("note", "now"))
        reports = await obj.run_alarms(until=obj.clock.now_ms() + 500)
        assert len(reports) == 1
        # The first pass ran the new work and one bounded wave of the backfill beside it.
        assert obj.submission(work).state is SubmissionState.SETTLED
        assert reports[0].settled == 1
        assert len(got.batches) == WAVE_BATCHES
        assert obj.alarm_at is not None
        await obj.run_alarms()
        # Each Thread's whole log: its emitted records, then its settlement record.
        per_thread = got.per_thread()
        assert per_thread == {**{f"t{n}": list(range(1, 52)) for n in range(6)}, "live": [1, 2]}
        last = {record.thread_id: record.kind for record in got.records}
        assert set(last.values()) == {SUBMISSION_SETTLED} and len(last) == 7
        stored = row(obj, "late")
        assert stored is not None and stored.cursor == log_end(obj) == 308
        assert obj.alarm_at is None


def test_a_backfill_runs_in_bounded_waves_beside_native_work() -> None:
    asyncio.run(_backfill())


async def _start_now() -> None:
    async with SimulatedObject(writer_app(), clock=clock(), check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", "old"))
        await obj.run_alarms()
        app = writer_app()
        got = Recorder()
        app.subscriber("fresh", start="now")(got)
        await obj.redeploy(app)
        await obj.run_alarms()
        assert got.records == []
        emit(obj, "t", ("note", "new"))
        await obj.run_alarms()
        # The new record and the new settlement; neither the old record nor its settlement.
        assert [(record.kind, record.seq) for record in got.records] == [
            ("note", 3), (SUBMISSION_SETTLED, 4)]
        assert got.records[0].body == "new"


def test_a_subscriber_starting_now_skips_the_log_before_it() -> None:
    asyncio.run(_start_now())
