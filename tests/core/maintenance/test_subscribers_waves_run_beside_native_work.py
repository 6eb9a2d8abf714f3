"""No subscriber delays native work of a Thread it does not gate: subscriber waves run beside
native work, each bounded by its allowance, and dispatch never waits for them. Prints the
simulated time from admission to settlement of Thread b's turns under a required subscriber
hanging on Thread a's records, and of a submission admitted while an optional subscriber
backfills at 20 s a batch."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from subscribers_support import CONFIG, Recorder, clock, emit, writer_app

from threadline import Record
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState


def _latency(obj: SimulatedObject, submission_id: str) -> int | None:
    """Simulated ms from admission to settlement; None: not settled."""
    done = obj.submission(submission_id)
    if done.state is not SubmissionState.SETTLED or done.settled_at is None:
        return None
    return int(done.settled_at) - int(done.created_at)


async def _hanging_required() -> list[int | None]:
    clk = clock()
    app = writer_app(CONFIG)
    got = Recorder()

    @app.subscriber("audit", required=True, dispatch_timeout=timedelta(seconds=30))
    async def audit(batch: list[Record]) -> None:
        if any(record.thread_id == "a" for record in batch):
            await asyncio.Event().wait()  # hangs on a's records, past its dispatch_timeout
        await got(batch)

    latencies: list[int | None] = []
    async with SimulatedObject(app, clock=clk) as obj:
        emit(obj, "a", ("note", 1))
        await obj.run_alarms(until=clk.now_ms() + 60_000)
        for _ in range(3):
            turn = emit(obj, "b", ("note", 1))
            await obj.run_alarms(until=clk.now_ms() + 600_000)
            latencies.append(_latency(obj, turn))
    return latencies


async def _backfilling_optional() -> int | None:
    clk = clock()
    app = writer_app(CONFIG)
    async with SimulatedObject(app, clock=clk) as obj:
        for _ in range(10):
            emit(obj, "old", *[("note", i) for i in range(100)])
        await obj.run_alarms()
        first_batch = asyncio.Event()
        slow = writer_app(CONFIG)

        @slow.subscriber("warehouse", batch=10, dispatch_timeout=timedelta(seconds=30))
        async def warehouse(batch: list[Record]) -> None:
            first_batch.set()
            await clk.sleep_until(clk.now_ms() + 20_000)

        await obj.redeploy(slow)
        admitted: list[str] = []

        async def request() -> None:
            await first_batch.wait()
            admitted.append(emit(obj, "c"))
            obj.space.scheduler.alarm.schedule_now()  # as the admitting route asks

        producer = asyncio.ensure_future(request())
        await obj.run_alarms(until=clk.now_ms() + 600_000)
        await producer
        return _latency(obj, admitted[0])


def test_a_required_subscriber_hanging_on_one_thread_does_not_delay_another_threads_turns(
) -> None:
    latencies = asyncio.run(_hanging_required())
    print(f"\nturns of Thread b under a required subscriber hanging on Thread a "
          f"(dispatch_timeout 30 s): admission to settlement {latencies} ms")
    assert all(latency is not None and latency < 1_000 for latency in latencies), latencies


def test_a_backfilling_optional_subscriber_does_not_delay_an_admitted_submission() -> None:
    latency = asyncio.run(_backfilling_optional())
    print(f"\nsubmission admitted while an optional subscriber backfills at 20 s a batch: "
          f"admission to settlement {latency} ms")
    assert latency is not None and latency < 1_000, latency
