"""Storage refusing to record one Thread's fault fails that Thread's item only: the failure is
logged, the rest of the pass goes on, other Threads' running Attempts are not cancelled (an
uncertain step of theirs in flight does not become an Unknown Outcome), and the Thread is
retried with backoff, as its owed work, nothing of it having been written, keeps the
generation's native retry going."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from itertools import pairwise

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.maintenance.faults import RecoveryEvent
from threadline.scheduling import NATIVE
from threadline.testing import Effects, SimulatedObject
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.recovery import RecoveryBlocked, RecoverySweepResult
from threadline.threads.turn import Turn

CLAIM_SQL = "SET state = 'running'"
FAULT_WRITE_SQL = "INSERT INTO tl_recovery_faults"
FAULT_DELETE_SQL = "DELETE FROM tl_recovery_faults"
BASE_MS = 1_000


def _app(
    effects: Effects, clock: ManualClock, holder: list[SimulatedObject],
    events: list[RecoveryEvent],
) -> Application:
    app = Application(RuntimeConfig(native_concurrency=4, alarm_backoff_base_ms=BASE_MS))

    @app.agent("charges")
    async def charges(turn: Turn) -> dict[str, int]:
        def arrive() -> None:
            # Input for another Thread arrives from outside the pass; its dispatch is refused,
            # and so is the write of the fault that refusal becomes.
            holder[0].fail_statements(CLAIM_SQL, times=1)
            holder[0].fail_statements(FAULT_WRITE_SQL, times=1)
            holder[0].admit("t-b", "echo", {})

        async def charge() -> int:
            effects.hit("charge")
            asyncio.get_running_loop().call_soon(arrive, context=contextvars.Context())
            await clock.sleep_until(clock.now_ms() + 1_000)
            return 7

        value = await turn.step("charge", charge, effect="uncertain")
        return {"charged": int(value)}  # type: ignore[arg-type]

    @app.agent("echo")
    async def echo(turn: Turn) -> str:
        effects.hit("echo")
        return "echo"

    @app.on_recovery_event
    def hear(event: RecoveryEvent) -> None:
        events.append(event)

    return app


def test_a_refused_fault_write_does_not_cancel_other_threads_attempts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        effects = Effects()
        clock = ManualClock()
        holder: list[SimulatedObject] = []
        events: list[RecoveryEvent] = []
        app = _app(effects, clock, holder, events)
        async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
            holder.append(obj)
            charged = obj.admit("t-a", "charges", {})
            with caplog.at_level(logging.ERROR, logger="threadline.maintenance"):
                await obj.run_alarms(max_passes=50)
            assert all(failure.remaining == 0 for failure in obj._storage_failures)

            first = obj.submission(charged.id)
            assert first.state is SubmissionState.SETTLED, first.state
            assert first.outcome is Outcome.COMPLETED
            assert effects.count("charge") == 1
            assert all(report.phase != "failed" for report in obj.reports)
            # t-b was retried once the refusals passed, and ran; no fault was ever recorded.
            (second,) = obj.submissions("t-b")
            assert second.outcome is Outcome.COMPLETED and effects.count("echo") == 1
            assert obj.space.faults.all() == [] and events == []
            assert any("could not record the recovery status of thread 't-b'" in record.message
                       for record in caplog.records)
            assert obj.alarm_at is None

    asyncio.run(body())


def _echo_app(events: list[RecoveryEvent]) -> Application:
    app = Application(RuntimeConfig(alarm_backoff_base_ms=BASE_MS))

    @app.agent("echo")
    async def echo(turn: Turn) -> str:
        return "echo"

    @app.on_recovery_event
    def hear(event: RecoveryEvent) -> None:
        events.append(event)

    return app


def test_a_thread_whose_fault_cannot_be_recorded_is_retried_with_backoff() -> None:
    async def body() -> None:
        clock = ManualClock()
        events: list[RecoveryEvent] = []
        async with SimulatedObject(_echo_app(events), clock=clock) as obj:
            claims = obj.fail_statements(CLAIM_SQL, times=5)
            writes = obj.fail_statements(FAULT_WRITE_SQL, times=5)
            submission = obj.admit("t", "echo", {})
            refused_at: list[int] = []
            while claims.remaining > 0:
                slot = obj.alarm_at
                assert slot is not None, "a Thread owing work must keep the alarm armed"
                left = claims.remaining
                await obj.run_alarms(until=slot)
                if claims.remaining < left:
                    refused_at.append(clock.now_ms())
            assert writes.remaining == 0
            await obj.run_alarms()

            assert obj.submission(submission.id).outcome is Outcome.COMPLETED
            assert all(report.phase != "failed" for report in obj.reports)
            gaps = [later - earlier for earlier, later in pairwise(refused_at)]
            assert len(gaps) == 4
            # The native retry's backoff: base * 2**k, jittered over its upper half.
            for k, gap in enumerate(gaps):
                ceiling = BASE_MS << k
                assert ceiling // 2 <= gap <= ceiling, (k, gaps)
            assert obj.space.faults.all() == [] and events == []

    asyncio.run(body())


def test_a_refused_clear_of_a_fault_with_no_open_work_is_retried() -> None:
    async def body() -> None:
        clock = ManualClock()
        events: list[RecoveryEvent] = []
        async with SimulatedObject(_echo_app(events), clock=clock,
                                   check_alarm_invariant=True) as obj:
            refused = obj.fail_statements(CLAIM_SQL, times=10**6)
            submission = obj.admit("t", "echo", {})
            await obj.run_alarms(until=clock.now_ms() + 1_000)
            assert [fault.thread_id for fault in obj.space.faults.all()] == ["t"]
            refused.remaining = 0
            obj.abort(submission.id)
            deletes = obj.fail_statements(FAULT_DELETE_SQL, times=2)
            await obj.run_alarms()

            assert deletes.remaining == 0
            assert obj.space.faults.all() == []
            assert [event.kind for event in events] == ["created", "cleared"]
            assert all(report.phase != "failed" for report in obj.reports)
            assert obj.alarm_at is None

    asyncio.run(body())


def test_a_refused_fault_transition_is_tried_once_per_pass() -> None:
    """Storage refusing a Thread's fault transition is met once per pass, not again at each
    turn of the pass: its retry is the pass's backoff."""

    async def body() -> None:
        clock = ManualClock()
        events: list[RecoveryEvent] = []
        async with SimulatedObject(_echo_app(events), clock=clock) as obj:
            refused = obj.fail_statements(CLAIM_SQL, times=10**6)
            submission = obj.admit("t", "echo", {})
            await obj.run_alarms(until=clock.now_ms() + 1_000)
            assert [fault.thread_id for fault in obj.space.faults.all()] == ["t"]
            refused.remaining = 0
            obj.abort(submission.id)  # nothing left to dispatch: the fault is to be cleared
            deletes = obj.fail_statements(FAULT_DELETE_SQL, times=10**6)
            tried: list[int] = []
            for _ in range(3):
                slot = obj.alarm_at
                assert slot is not None, "the refused clear must keep the alarm armed"
                passes = len(obj.reports)
                await obj.run_alarms(until=slot)
                assert len(obj.reports) == passes + 1
                tried.append(10**6 - deletes.remaining - sum(tried))
            assert tried == [1, 1, 1]
            assert [fault.thread_id for fault in obj.space.faults.all()] == ["t"]
            deletes.remaining = 0
            await obj.run_alarms()
            assert obj.space.faults.all() == []

    asyncio.run(body())


def test_a_thread_whose_recovery_is_blocked_is_not_dispatched_when_its_fault_is_refused() -> None:
    """A blocked recovery holds the Thread's head back whether or not its fault could be
    recorded: dispatching over an unrecovered Thread is never the fallback."""

    async def body() -> None:
        effects = Effects()
        app = Application(RuntimeConfig(alarm_backoff_base_ms=BASE_MS))

        @app.agent("echo")
        async def echo(turn: Turn) -> str:
            effects.hit("echo")
            return "echo"

        async with SimulatedObject(app, clock=ManualClock()) as obj:
            blocked = {"on": True}
            recovery = obj.space.runtime.recovery
            original = recovery.run

            def run_recovery(thread_id: str) -> RecoverySweepResult:
                if blocked["on"]:
                    return RecoverySweepResult((), (RecoveryBlocked(thread_id, "decode",
                                                                    "KeyError"),))
                return original(thread_id)

            recovery.run = run_recovery  # type: ignore[method-assign]
            writes = obj.fail_statements(FAULT_WRITE_SQL, times=1)
            submission = obj.admit("t", "echo", {})
            await obj.run_alarms(until=obj.alarm_at)  # the one pass due now
            assert writes.remaining == 0 and len(obj.reports) == 1
            assert effects.count("echo") == 0
            assert obj.submission(submission.id).state is SubmissionState.QUEUED
            blocked["on"] = False
            await obj.run_alarms()
            assert obj.submission(submission.id).outcome is Outcome.COMPLETED
            assert effects.count("echo") == 1

    asyncio.run(body())


def test_a_fault_transition_refused_then_recorded_in_one_pass_leaves_nothing_owed() -> None:
    """A faulted Thread's retry runs both its heads: the clear after the first dispatch is
    refused, the one after the second is recorded. Then the Thread owes nothing more, so the
    pass acknowledges its generation and arms no further pass."""

    async def body() -> None:
        clock = ManualClock()
        events: list[RecoveryEvent] = []
        async with SimulatedObject(_echo_app(events), clock=clock) as obj:
            obj.fail_statements(CLAIM_SQL, times=1)
            first = obj.admit("t", "echo", {})
            await obj.run_alarms(until=obj.alarm_at)
            (fault,) = obj.space.faults.all()
            second = obj.admit("t", "echo", {})
            deletes = obj.fail_statements(FAULT_DELETE_SQL, times=1)
            await obj.run_alarms(until=fault.retry_at)
            retry = obj.reports[-1]
            assert retry.started_at == fault.retry_at
            assert (retry.dispatched, retry.settled) == (2, 2)
            assert deletes.remaining == 0 and obj.space.faults.all() == []
            assert obj.submission(first.id).outcome is Outcome.COMPLETED
            assert obj.submission(second.id).outcome is Outcome.COMPLETED
            native = obj.space.scheduler.due_queue.get(NATIVE)
            assert native is not None and native.due_at is None
            assert obj.alarm_at is None

    asyncio.run(body())
