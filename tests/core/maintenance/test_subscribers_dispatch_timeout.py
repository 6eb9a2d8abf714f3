"""Each delivery is bounded by its subscriber's dispatch_timeout on the object's clock: one
that outruns it is cancelled, abandoned after cancel_grace_ms should it ignore that, counted as
a failed delivery (backed off, redelivered), and never holds the pass or native work."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from subscribers_support import CONFIG, clock, emit, log_end, row, writer_app

from threadline import Record
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState


async def _overrun() -> None:
    app = writer_app()
    calls: list[int] = []
    never = asyncio.Event()

    # The emitted record alone: the batch that overruns and the one delivered after it.
    @app.subscriber("stuck", kinds={"note"}, dispatch_timeout=timedelta(seconds=5))
    async def stuck(batch: list[Record]) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            while not never.is_set():  # ignores its cancellation
                try:
                    await never.wait()
                except asyncio.CancelledError:
                    continue

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        try:
            await _check(obj, calls)
        finally:
            never.set()


async def _check(obj: SimulatedObject, calls: list[int]) -> None:
    await obj.run_alarms()
    emit(obj, "t", ("note", 1))
    other = emit(obj, "u")
    started = obj.clock.now_ms()
    await obj.run_alarms(until=started + 5_000 + CONFIG.cancel_grace_ms + 600)
    assert obj.submission(other).state is SubmissionState.SETTLED
    stored = row(obj, "stuck")
    assert stored is not None and stored.failures == 1 and stored.error_type == "TimeoutError"
    assert stored.cursor == 0
    assert obj.space.publication.abandoned == 1
    await obj.run_alarms()
    done = row(obj, "stuck")
    # Its batch was read to the log's end, past both settlement records.
    assert done is not None and done.cursor == log_end(obj) == 3 and calls == [1, 1]


def test_a_delivery_outrunning_its_timeout_is_abandoned_and_retried() -> None:
    asyncio.run(_overrun())
