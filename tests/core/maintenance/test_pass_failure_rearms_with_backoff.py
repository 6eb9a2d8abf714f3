"""A pass that fails logs one content-free line, re-arms the failed generation with a durable
backoff, and returns normally; a racing producer is never postponed; a defect propagates after
the same re-arming."""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from pass_support import CONFIG, Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.errors import StorageError
from threadline.maintenance import PassPhase
from threadline.scheduling import NATIVE, AlarmDecision, read_state
from threadline.storage import SqliteStorage
from threadline.threads.model import SubmissionState


def _break_scan(obj: Obj, exc: Exception, *, times: int = 1) -> list[int]:
    calls = [0]
    ledger = obj.space.runtime.ledger
    original = ledger.live_threads

    def failing() -> object:
        calls[0] += 1
        if calls[0] <= times:
            raise exc
        return original()

    ledger.live_threads = failing  # type: ignore[assignment,method-assign]
    return calls


def test_pass_failure_rearms_the_failed_generation_with_backoff_and_returns(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        sub = obj.admit("t1", {"secret": "do not log me"})
        _break_scan(obj, StorageError("disk I/O error"), times=2)
        clock.advance(1_000)
        report = await obj.fire()  # returns normally
        assert report.phase is PassPhase.FAILED
        assert (report.failure_type, report.failure_message) == ("StorageError", "disk I/O error")
        assert report.alarm is AlarmDecision.REARMED
        state = read_state(raw_storage)
        retry = state.pending_retry
        assert retry is not None and retry.stalls == 1
        now = clock.now_ms()
        base = CONFIG.alarm_backoff_base_ms
        assert now + base // 2 <= retry.not_before <= now + base
        assert raw_storage.known_alarm() == retry.not_before
        # One structured line, without the failure text or any payload.
        failures = [line for line in obj.logs if "maintenance pass failed" in line]
        assert len(failures) == 1
        assert "StorageError" in failures[0]
        assert "disk I/O" not in failures[0] and "secret" not in failures[0]

        # Failing again backs off further (stalls grow), still returning normally.
        clock.set(retry.not_before)
        second = await obj.fire()
        assert second.phase is PassPhase.FAILED
        again = read_state(raw_storage).pending_retry
        assert again is not None and again.stalls == 2
        assert again.not_before - clock.now_ms() >= base  # b = 2 * base, jitter over [b/2, b]

        clock.set(again.not_before)
        reports = await obj.run()
        assert reports[0].phase is PassPhase.ACTIONABLE
        assert obj.get(sub.id).state is SubmissionState.SETTLED
        assert read_state(raw_storage).pending_retry is None

    run(body())


def test_pass_fired_for_another_lane_does_not_rerun_a_generation_in_backoff(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", {"n": 1})
        calls = _break_scan(obj, StorageError("boom"), times=1)
        await obj.fire()
        retry = read_state(raw_storage).pending_retry
        assert retry is not None and calls[0] == 1

        async def idle(now: int, deadline: int) -> int | None:
            return None

        obj.space.lanes.register("probe.lane", idle, dispatch_timeout_ms=1_000)
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms() + 10)
        clock.advance(10)
        assert clock.now_ms() < retry.not_before
        report = await obj.fire()
        assert report.phase is PassPhase.CAUGHT_UP
        assert calls[0] == 1  # the ledger was not scanned again before the backoff
        assert raw_storage.known_alarm() == retry.not_before

    run(body())


def test_pass_failure_never_postpones_a_racing_producer(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", {"n": 1})
        ledger = obj.space.runtime.ledger
        original = ledger.live_threads

        def racing_then_failing() -> object:
            ledger.live_threads = original  # type: ignore[method-assign]
            # A producer (its own task, so its own context) commits while the pass observes.
            contextvars.Context().run(obj.admit, "t2", {"n": 2})
            raise StorageError("boom")

        ledger.live_threads = racing_then_failing  # type: ignore[method-assign]
        report = await obj.fire()
        assert report.phase is PassPhase.FAILED
        native = obj.space.scheduler.due_queue.get(NATIVE)
        min_delay = CONFIG.min_alarm_delay_ms
        assert native is not None and native.due_at == clock.now_ms() + min_delay
        assert raw_storage.known_alarm() == clock.now_ms() + min_delay

    run(body())


def test_pass_defect_propagates_after_rearming(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", {"n": 1})
        _break_scan(obj, TypeError("a bug"), times=1)
        with pytest.raises(TypeError):
            await obj.fire()
        # The slot is not left empty while native work is owed.
        retry = read_state(raw_storage).pending_retry
        assert retry is not None
        assert raw_storage.known_alarm() == retry.not_before
        assert obj.space.maintenance.reports.recent[-1].phase is PassPhase.FAILED

    run(body())


def test_pass_failure_never_postpones_a_producer_still_in_flight(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """A producer whose body was still running when the pass failed commits facts the pass
    could not have seen: the failure backs its generation off, but the native lane stays due
    after the minimum delay, not at the backoff."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        gate = obj.space.scheduler.gate
        entered, finish = asyncio.Event(), asyncio.Event()

        async def producer() -> None:
            async with gate.mutation():
                entered.set()
                await finish.wait()

        task = asyncio.ensure_future(producer())
        await entered.wait()
        assert gate.active == 1
        _break_scan(obj, StorageError("boom"), times=1)
        report = await obj.fire()
        assert report.phase is PassPhase.FAILED
        retry = read_state(raw_storage).pending_retry
        native = obj.space.scheduler.due_queue.get(NATIVE)
        min_delay = CONFIG.min_alarm_delay_ms
        assert retry is not None and retry.not_before > clock.now_ms() + min_delay
        assert native is not None and native.due_at == clock.now_ms() + min_delay
        assert raw_storage.known_alarm() == clock.now_ms() + min_delay
        finish.set()
        await task

    run(body())
