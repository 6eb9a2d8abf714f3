"""A delivery that raises is retried with backoff (``base * 2^failures``, jittered), the same
batch again, and the failure count starts over once a batch is delivered; native work does
not wait for a subscriber that is not required."""

from __future__ import annotations

import asyncio

from subscribers_support import (
    Recorder,
    clock,
    emit,
    log_end,
    maintenance_view,
    row,
    writer_app,
)

from threadline import Record
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState


async def _backoff() -> None:
    app = writer_app()
    got = Recorder()
    calls: list[tuple[int, list[str]]] = []
    failing = [True, True]

    def fail(batch: list[Record]) -> BaseException | None:
        calls.append((obj.clock.now_ms(), [record.record_id for record in batch]))
        return RuntimeError("destination down") if failing and failing.pop() else None

    got.fail = fail
    # The emitted records: the settlement records would join every batch.
    app.subscriber("sink", kinds={"note"})(got)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        emit(obj, "t", ("note", 1), ("note", 2))
        await obj.run_alarms(until=obj.clock.now_ms() + 600)
        first = row(obj, "sink")
        assert first is not None and first.failures == 1 and first.cursor == 0
        assert first.error_type == "RuntimeError" and first.error == "destination down"
        assert first.retry_at is not None and first.failed_at is not None
        assert 500 <= first.retry_at - first.failed_at <= 1_000
        view = {item["name"]: item for item in (await maintenance_view(obj))["subscribers"]}
        assert view["sink"]["state"] == "backing-off" and view["sink"]["failures"] == 1
        # The subscriber backs off; the Thread's next submission does not wait for it.
        later = emit(obj, "t", ("note", 3))
        await obj.run_alarms(until=first.retry_at - 1)
        assert obj.submission(later).state is SubmissionState.SETTLED
        assert len(calls) == 1
        # Due at its retry time (the alarm keeps its minimum delay after the last pass).
        await obj.run_alarms(until=first.retry_at + 500)
        second = row(obj, "sink")
        assert second is not None and second.failures == 2
        assert second.retry_at is not None and second.failed_at is not None
        assert 1_000 <= second.retry_at - second.failed_at <= 2_000
        await obj.run_alarms()
        # Each retry starts from the same cursor (the record appended meanwhile joins the
        # batch), and the batch is delivered whole, in order.
        assert len(calls) == 3 and len(calls[0][1]) == 2
        assert calls[0][1] == calls[1][1][:2] == calls[2][1][:2]
        assert got.per_thread() == {"t": [1, 2, 4]}
        done = row(obj, "sink")
        assert done is not None and done.failures == 0 and done.retry_at is None
        # The delivered batch was read to the log's end, past the last settlement record.
        assert done.error is None and done.cursor == log_end(obj) == 5
        assert obj.alarm_at is None


def test_a_failed_delivery_is_retried_with_backoff() -> None:
    asyncio.run(_backoff())
