"""The required gate holds only the Thread it gates: a required subscriber that keeps failing
on Thread a's records (backing off, or parked) holds a's next native work and nothing else.
Thread b's records go on being delivered past a's, in b's order, and b's work goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from subscribers_support import CONFIG, Recorder, clock, emit, writer_app

from threadline import DeliveryRefused, Record
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState

HOUR_MS = 3_600_000


def _failing_on(thread: str, error: Callable[[], Exception]) -> Recorder:
    got = Recorder()
    got.fail = lambda batch: error() if any(r.thread_id == thread for r in batch) else None
    return got


async def _an_hour_of_failures(error: Callable[[], Exception]) -> None:
    app = writer_app(CONFIG)
    got = _failing_on("a", error)
    app.subscriber("audit", required=True)(got)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        emit(obj, "a", ("note", 1))
        held = emit(obj, "a", ("note", 2))
        first = emit(obj, "b", ("note", 1))
        await obj.run_alarms(until=obj.clock.now_ms() + HOUR_MS)
        second = emit(obj, "b", ("note", 2))
        await obj.run_alarms(until=obj.clock.now_ms() + HOUR_MS)
        # After two hours of a's records failing, b's second submission has settled...
        assert obj.submission(first).state is SubmissionState.SETTLED
        assert obj.submission(second).state is SubmissionState.SETTLED
        # ...each of b's records delivered once, in b's order; a's next work still waits.
        b_records: list[Record] = [r for r in got.records if r.thread_id == "b"]
        assert [r.seq for r in b_records] == [1, 2, 3, 4]
        assert obj.submission(held).state is SubmissionState.QUEUED
        assert got.per_thread().get("a") is None


@pytest.mark.parametrize("error", [lambda: RuntimeError("audit store down"),
                                   lambda: DeliveryRefused("audit store refused")],
                         ids=["backing-off", "parked"])
def test_a_required_subscriber_failing_on_one_thread_holds_only_that_threads_work(
    error: Callable[[], Exception],
) -> None:
    asyncio.run(_an_hour_of_failures(error))
