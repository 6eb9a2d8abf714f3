"""Maintenance-pass details that the behaviour tests reach only on their common path."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import pytest
from pass_support import CONFIG, Obj, echo_app, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import StorageError
from threadline.ids import RandomIds
from threadline.maintenance import PassPhase
from threadline.maintenance.pass_state import BEGIN_AFTER, CHECKPOINT_BEFORE, FINISH_BEFORE
from threadline.scheduling import NATIVE, NativeRetry, read_state
from threadline.scheduling import state as gen
from threadline.space import Space
from threadline.storage import SqliteStorage
from threadline.threads.model import SubmissionState
from threadline.threads.recovery import RecoveryBlocked, RecoverySweepResult


def test_a_failed_pass_never_shortens_the_backoff_already_pending(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", "hello")
        dirty = read_state(raw_storage).dirty
        far = clock.now_ms() + 10 * CONFIG.alarm_backoff_cap_ms
        raw_storage.transaction(
            lambda: gen.set_retry(raw_storage, NativeRetry(dirty, far, True, 3)))
        # The native lane is due now for another reason (a timer, say): the pass is actionable
        # although the generation's own retry is still far ahead.
        obj.space.scheduler.gate.schedule(NATIVE, clock.now_ms())

        def broken() -> object:
            raise StorageError("disk I/O error")

        obj.space.runtime.ledger.live_threads = broken  # type: ignore[assignment,method-assign]
        report = await obj.fire()
        assert report.phase is PassPhase.FAILED
        retry = read_state(raw_storage).pending_retry
        assert retry is not None and retry.stalls == 4
        assert retry.not_before == far
        assert retry.native_only

    run(body())


def _break_scan(obj: Obj) -> None:
    def broken() -> object:
        raise StorageError("disk I/O error")

    obj.space.runtime.ledger.live_threads = broken  # type: ignore[assignment,method-assign]


def test_a_failure_backs_a_new_generation_off_afresh(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """A retry left from an older generation is obsolete: its stalls and time do not carry."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", "hello")
        dirty = read_state(raw_storage).dirty
        far = clock.now_ms() + 10 * CONFIG.alarm_backoff_cap_ms
        raw_storage.transaction(
            lambda: gen.set_retry(raw_storage, NativeRetry(dirty - 1, far, True, 6)))
        _break_scan(obj)
        assert (await obj.fire()).phase is PassPhase.FAILED
        retry = read_state(raw_storage).pending_retry
        assert retry is not None and (retry.generation, retry.stalls) == (dirty, 1)
        base = CONFIG.alarm_backoff_base_ms
        assert clock.now_ms() + base // 2 <= retry.not_before <= clock.now_ms() + base

    run(body())


def test_a_caught_up_pass_that_fails_owes_no_native_retry(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """A caught-up pass that fails with nothing due owes nothing: it leaves the generation
    acknowledged, no retry and the slot empty."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        obj.admit("t1", "hello")
        await obj.run()
        dirty, processed = obj.generation()
        assert dirty == processed

        def refuse(location: str) -> None:
            raise StorageError("disk I/O error")

        obj.failpoints.install(FINISH_BEFORE, refuse)
        report = await obj.fire()
        assert report.phase is PassPhase.FAILED
        state = read_state(raw_storage)
        assert state.retry is None and (state.dirty, state.processed) == (dirty, processed)
        native = obj.space.scheduler.due_queue.get(NATIVE)
        assert native is None or native.due_at is None
        assert raw_storage.known_alarm() is None

    run(body())


SHORT = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000,
                      event_deadline_ms=100_000, yield_after_ms=50_000)


def test_a_lane_wave_never_outlives_the_event_deadline(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, lambda: echo_app(SHORT))
        await obj.start()
        await obj.run()
        seen: list[tuple[int, int]] = []

        async def handler(now: int, deadline: int) -> int | None:
            seen.append((now, deadline))
            return None

        obj.space.lanes.register("probe.lane", handler, dispatch_timeout_ms=300_000)
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())
        started = clock.now_ms()
        await obj.fire()
        assert seen == [(started, started + SHORT.event_deadline_ms)]

    run(body())


def test_a_lane_gets_one_wave_per_pass_even_if_still_due(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        calls: list[int] = []

        async def busy(now: int, deadline: int) -> int | None:
            calls.append(now)
            return now  # more to do at once

        obj.space.lanes.register("probe.lane", busy, dispatch_timeout_ms=1_000)
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())
        obj.admit("t1", "hello")  # an actionable pass also serves lanes that became due
        report = await obj.fire()
        assert report.phase is PassPhase.ACTIONABLE
        assert len(calls) == 1

    run(body())


ONE_AT_A_TIME = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000,
                              native_concurrency=1)


def _ordered_app(order: list[str]) -> Application:
    app = Application(ONE_AT_A_TIME)

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        order.append(turn.input)
        return turn.input

    return app


def test_one_pass_serves_threads_round_robin_one_head_at_a_time(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        order: list[str] = []
        obj = Obj(raw_storage, clock, lambda: _ordered_app(order))
        await obj.start()
        await obj.run()
        for thread in ("a", "b"):
            for n in (1, 2):
                obj.admit(thread, f"{thread}{n}")
        report = await obj.fire()
        assert order == ["a1", "b1", "a2", "b2"]
        assert (report.dispatched, report.settled, report.nonterminal) == (4, 4, 0)

    run(body())


def test_round_robin_wraps_to_the_first_thread_after_the_last_served(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        order: list[str] = []
        obj = Obj(raw_storage, clock, lambda: _ordered_app(order))
        await obj.start()
        await obj.run()
        for thread in ("a", "b", "c"):
            obj.admit(thread, thread)
        raw_storage.transaction(
            lambda: gen.set_cursor(raw_storage, "last_served_thread", "z"))
        await obj.fire()
        assert order == ["a", "b", "c"]

    run(body())


def test_pass_reports_count_the_open_submissions_left(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("parked", "x", agent="not-registered")
        obj.admit("t1", "a")
        obj.admit("t1", "b")
        actionable = await obj.fire()
        assert actionable.phase is PassPhase.ACTIONABLE
        assert actionable.nonterminal == 1  # counted after the pass: only the parked head
        await obj.run()
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())
        caught_up = await obj.fire()  # fired for a lane: no ledger scan, the stored count
        assert caught_up.phase is PassPhase.CAUGHT_UP
        assert caught_up.nonterminal == 1

    run(body())


def test_pass_arms_a_crash_fallback_after_the_generation_backoff(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """Lost mid-pass, the native lane is due again after the backoff of the stalls so far:
    never at once (a pass that kills the object would loop) and never earlier than due."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        fallback: list[int] = []

        def look(location: str) -> None:
            lane = obj.space.scheduler.due_queue.get(NATIVE)
            assert lane is not None and lane.due_at is not None
            fallback.append(lane.due_at - clock.now_ms())

        obj.failpoints.install(BEGIN_AFTER, look)
        base = CONFIG.alarm_backoff_base_ms
        obj.admit("t1", "first")
        await obj.fire()
        assert base // 2 <= fallback[-1] <= base  # no stalls yet: b = base

        obj.admit("t1", "second")
        dirty = read_state(raw_storage).dirty
        raw_storage.transaction(
            lambda: gen.set_retry(raw_storage, NativeRetry(dirty, clock.now_ms(), True, 4)))
        await obj.fire()
        assert base * 8 <= fallback[-1] <= base * 16  # four stalls: b = base * 2**4

    run(body())


def test_input_admitted_under_a_fault_becomes_a_recipient_at_the_next_pass(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        fault = obj.space.faults.record("t1", failure="decode", error_type="KeyError",
                                        recipients=["earlier"])
        later = obj.admit("t1", "after the fault")
        await obj.fire()
        now = obj.space.faults.get("t1")
        assert now is not None and now.recipients == ("earlier", later.id)
        assert now.retry_at == fault.retry_at
        assert obj.get(later.id).state is SubmissionState.QUEUED

    run(body())


def test_a_parked_head_is_not_attempted_again_by_later_passes(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("parked", "x", agent="not-registered")
        await obj.run()
        attempted: list[str] = []
        runtime = obj.space.runtime
        original = runtime.process_thread_head

        async def spy(thread_id: str, **kwargs: Any) -> Any:
            attempted.append(thread_id)
            return await original(thread_id, **kwargs)

        runtime.process_thread_head = spy  # type: ignore[method-assign]
        obj.admit("t1", "a")
        await obj.run()
        assert attempted == ["t1"]

    run(body())


def test_a_thread_whose_recovery_is_blocked_is_not_dispatched(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        sub = obj.admit("t1", "a")
        recovery = obj.space.runtime.recovery
        original = recovery.run

        def blocked(thread_id: str) -> RecoverySweepResult:
            if thread_id == "t1":
                return RecoverySweepResult((), (RecoveryBlocked("t1", "decode", "KeyError"),))
            return original(thread_id)

        recovery.run = blocked  # type: ignore[method-assign]
        report = await obj.fire()
        assert report.dispatched == 1 and report.settled == 0
        assert obj.get(sub.id).state is SubmissionState.QUEUED
        fault = obj.space.faults.get("t1")
        assert fault is not None and fault.recipients == (sub.id,)

    run(body())


def test_input_arriving_during_a_long_attempt_waits_for_a_free_slot(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """A producer wakes the pass mid-Attempt; with every slot taken the new Thread waits for
    the running Attempt, then runs in the same pass."""

    async def body() -> None:
        order: list[str] = []
        started = asyncio.Event()
        release = asyncio.Event()

        def make() -> Application:
            app = Application(ONE_AT_A_TIME)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                order.append(turn.input)
                if turn.input == "slow":
                    started.set()
                    await release.wait()
                return turn.input

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        obj.admit("a", "slow")
        firing = asyncio.ensure_future(obj.fire())
        await started.wait()
        obj.admit("b", "quick")
        for _ in range(20):
            await asyncio.sleep(0)
        assert order == ["slow"]
        release.set()
        report = await firing
        assert report.phase is PassPhase.ACTIONABLE
        assert order == ["slow", "quick"] and report.settled == 2

    run(body())


def test_a_pass_failing_at_its_checkpoint_reports_the_open_work_it_saw(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("parked", "x", agent="not-registered")
        obj.admit("t1", "a")

        def refuse(location: str) -> None:
            raise StorageError("disk I/O error")

        obj.failpoints.install(CHECKPOINT_BEFORE, refuse)
        report = await obj.fire()
        assert report.phase is PassPhase.FAILED
        assert (report.settled, report.nonterminal) == (1, 1)

    run(body())


def _nothing_to_run_for(obj: Obj, stuck: str) -> None:
    """``process_thread_head`` finds nothing to run for ``stuck`` (as for a head another
    caller holds), so that Thread's work stays owed without progress."""
    runtime = obj.space.runtime
    original = runtime.process_thread_head

    async def process(thread_id: str, **kwargs: Any) -> Any:
        if thread_id == stuck:
            return None
        return await original(thread_id, **kwargs)

    runtime.process_thread_head = process  # type: ignore[method-assign]


def _native_due(obj: Obj) -> int | None:
    lane = obj.space.scheduler.due_queue.get(NATIVE)
    return None if lane is None else lane.due_at


def test_work_owed_without_progress_backs_the_generation_off_durably(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("stuck", "x")
        _nothing_to_run_for(obj, "stuck")
        report = await obj.fire()
        assert (report.dispatched, report.settled) == (1, 0)
        state = read_state(raw_storage)
        retry = state.pending_retry
        assert retry is not None and retry.native_only
        assert (retry.generation, retry.stalls) == (state.dirty, 1)
        base = CONFIG.alarm_backoff_base_ms
        assert clock.now_ms() + base // 2 <= retry.not_before <= clock.now_ms() + base
        assert _native_due(obj) == retry.not_before
        assert state.processed < state.dirty  # not acknowledged: the work is still owed

    run(body())


def test_an_earlier_timed_obligation_wins_over_the_durable_backoff(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("stuck", "x")
        timed = obj.admit("later", "y")
        wake = clock.now_ms() + 100
        raw_storage.exec("UPDATE tl_submissions SET state = 'ready', not_before = ? "
                         "WHERE id = ?", wake, timed.id)
        _nothing_to_run_for(obj, "stuck")
        await obj.fire()
        retry = read_state(raw_storage).pending_retry
        assert retry is not None and retry.not_before > wake
        assert _native_due(obj) == wake

    run(body())


def test_owed_work_after_a_settlement_is_rearmed_promptly_not_backed_off(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("stuck", "x")
        obj.admit("fine", "y")
        far = obj.admit("later", "z")  # a timed obligation far ahead does not delay it
        raw_storage.exec("UPDATE tl_submissions SET state = 'ready', not_before = ? "
                         "WHERE id = ?", clock.now_ms() + 3_600_000, far.id)
        _nothing_to_run_for(obj, "stuck")
        report = await obj.fire()
        assert report.settled == 1
        assert read_state(raw_storage).pending_retry is None
        assert _native_due(obj) == clock.now_ms() + obj.space.scheduler.alarm.min_delay_ms

    run(body())


YIELDING = RuntimeConfig(alarm_backoff_base_ms=1_000, yield_after_ms=10_000,
                         event_deadline_ms=20_000)


def test_an_attempt_yields_at_the_first_step_boundary_after_the_yield_deadline(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        steps: list[str] = []

        def make() -> Application:
            app = Application(YIELDING)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                def slow() -> str:
                    clock.advance(YIELDING.yield_after_ms)
                    return "one"

                steps.append(await turn.step("one", slow))
                steps.append(await turn.step("two", lambda: "two"))
                return steps

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        sub = obj.admit("t1", {})
        report = await obj.fire()
        assert steps == ["one"] and report.settled == 0
        assert obj.get(sub.id).state is SubmissionState.READY
        await obj.run()
        assert obj.get(sub.id).state is SubmissionState.SETTLED

    run(body())


def test_pass_duration_is_measured_on_the_injected_clock(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                clock.advance(1_234)
                return "ok"

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        obj.admit("t1", "x")
        assert (await obj.fire()).duration_ms == 1_234
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())
        assert (await obj.fire()).duration_ms == 0

    run(body())


def test_a_plain_pass_recovers_nothing_and_leaves_the_recovery_cursor(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", "x")
        report = await obj.fire()
        assert (report.settled, report.recovered) == (1, 0)
        assert read_state(raw_storage).last_recovered_thread is None

    run(body())


YIELDING_ONE_AT_A_TIME = RuntimeConfig(alarm_backoff_base_ms=1_000, yield_after_ms=10_000,
                                       event_deadline_ms=20_000, native_concurrency=1)


def test_work_left_at_the_yield_deadline_is_rearmed_promptly_not_backed_off(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        def make() -> Application:
            app = Application(YIELDING_ONE_AT_A_TIME)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                clock.advance(YIELDING_ONE_AT_A_TIME.yield_after_ms)
                raise RuntimeError("transient")  # retried later: nothing settles

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        obj.admit("a", "x")
        obj.admit("b", "y")
        report = await obj.fire()
        assert (report.dispatched, report.settled) == (1, 0)
        assert read_state(raw_storage).pending_retry is None
        assert _native_due(obj) == clock.now_ms() + obj.space.scheduler.alarm.min_delay_ms

    run(body())


def test_without_an_injected_log_the_pass_logs_to_the_package_logger(
    raw_storage: SqliteStorage, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        app = echo_app()
        space = Space(app, raw_storage, clock=clock, rng=random.Random(1),
                      ids=RandomIds(random.Random(2)))
        await space.start()
        space.runtime.ledger.admit("t1", "echo", "x")
        _break_scan_of(space)
        raw_storage.take_due_alarm(clock.now_ms())
        with caplog.at_level(logging.ERROR, logger="threadline.maintenance"):
            assert (await space.alarm()).phase is PassPhase.FAILED
        assert any("maintenance pass failed" in r.getMessage() for r in caplog.records)

    run(body())


def _break_scan_of(space: Space) -> None:
    def broken() -> object:
        raise StorageError("disk I/O error")

    space.runtime.ledger.live_threads = broken  # type: ignore[assignment,method-assign]
