"""A storage failure while writing a round-robin cursor (``last_recovered_thread`` before a
recovery, ``last_served_thread`` before a dispatch) fails that Thread only: it becomes the
Thread's recovery fault (logged, retried with backoff), the pass goes on, and the Attempts of
other Threads running in the same pass are not cancelled (an uncertain step of theirs in
flight must not become an Unknown Outcome)."""

from __future__ import annotations

import asyncio
import contextvars
import logging

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.maintenance import PassPhase
from threadline.maintenance.faults import fault_retry_delay_ms
from threadline.testing import Effects, SimulatedObject
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn

RECOVERED_CURSOR = "SET last_recovered_thread"
SERVED_CURSOR = "SET last_served_thread"
#: Longer than a new fault's retry delay: the input arriving at the end of it finds the
#: faulted Threads of the recovery case due again.
CHARGE_MS = fault_retry_delay_ms(0) + 1_000


def _app(effects: Effects, clock: ManualClock, holder: list[SimulatedObject],
         cursor: str, concurrency: int) -> Application:
    app = Application(RuntimeConfig(native_concurrency=concurrency))

    @app.agent("charges")
    async def charges(turn: Turn) -> dict[str, int]:
        async def arrive() -> None:
            await clock.sleep_until(clock.now_ms() + CHARGE_MS - 500)
            obj = holder[0]
            obj.fail_statements(cursor, times=1)
            # Input for two other Threads arrives (from a request, outside the pass): the
            # pass rescans and takes up the other Threads while this Attempt still runs.
            obj.admit("t-b", "echo", {})
            obj.admit("t-c", "echo", {})

        async def charge() -> int:
            effects.hit("charge")
            asyncio.get_running_loop().create_task(arrive(), context=contextvars.Context())
            await clock.sleep_until(clock.now_ms() + CHARGE_MS)
            return 7

        value = await turn.step("charge", charge, effect="uncertain")
        return {"charged": int(value)}  # type: ignore[arg-type]

    @app.agent("echo")
    async def echo(turn: Turn) -> str:
        effects.hit("echo")
        return "echo"

    return app


async def _run(cursor: str) -> None:
    effects = Effects()
    clock = ManualClock()
    holder: list[SimulatedObject] = []
    # Dispatch: one slot left beside the charge, so one of t-b/t-c waits behind the other
    # and the served cursor is stored. Recovery: slots enough for everything.
    concurrency = 2 if cursor == SERVED_CURSOR else 4
    app = _app(effects, clock, holder, cursor, concurrency)
    async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
        holder.append(obj)
        if cursor == RECOVERED_CURSOR:
            # Two Threads under a recovery fault, due again while the charge runs: the pass
            # recovers both (the recovered cursor is stored, one waiting behind the other).
            for thread in ("t-x", "t-y"):
                sub = obj.admit(thread, "echo", {})
                obj.space.faults.record(thread, failure="earlier", error_type="E",
                                        recipients=[sub.id])
        charged = obj.admit("t-a", "charges", {})
        await obj.run_alarms(max_passes=50)
        (failure,) = obj._storage_failures
        assert failure.remaining == 0  # the cursor write was refused once

        first = obj.submission(charged.id)
        assert first.state is SubmissionState.SETTLED, first.state
        assert first.outcome is Outcome.COMPLETED
        assert effects.count("charge") == 1
        assert all(report.phase is not PassPhase.FAILED for report in obj.reports)
        # The Thread whose cursor write failed was faulted, retried later, and served.
        assert all(sub.outcome is Outcome.COMPLETED for sub in obj.submissions()
                   if sub.thread_id != "t-a")
        assert obj.space.faults.all() == []
        assert obj.alarm_at is None
        return None


@pytest.mark.parametrize(("cursor", "named"), [(RECOVERED_CURSOR, "t-x"), (SERVED_CURSOR, "t-b")])
def test_a_failed_cursor_write_fails_its_thread_not_the_pass(
    cursor: str, named: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline")
    asyncio.run(_run(cursor))
    # The refusal is logged (without content) against the Thread the cursor named, which
    # became a fault and was served once its retry came.
    name = cursor.removeprefix("SET ")
    assert [record.getMessage() for record in caplog.records
            if "could not store the maintenance cursor" in record.getMessage()] == [
        f"threadline: could not store the maintenance cursor {name} (StorageError);"
        f" thread {named!r} is retried after a backoff"]
    assert not any("maintenance pass failed" in record.getMessage()
                   for record in caplog.records)


def test_the_thread_a_refused_cursor_names_is_not_dispatched_before_its_fault_retry() -> None:
    # One slot, two runnable Threads: the served cursor is stored before t-a is dispatched,
    # and storage refuses it. t-a is left alone this time, under a fault that names the
    # refusal; t-b is served; t-a runs only once its fault's retry comes.
    async def run() -> None:
        app = Application(RuntimeConfig(native_concurrency=1))

        @app.agent("echo")
        async def echo(turn: Turn) -> str:
            return "echo"

        async with SimulatedObject(app, check_alarm_invariant=True) as obj:
            a = obj.admit("t-a", "echo", {})
            b = obj.admit("t-b", "echo", {})
            obj.fail_statements(SERVED_CURSOR, times=1)
            started = obj.clock.now_ms()
            await obj.run_alarms(until=started + fault_retry_delay_ms(0) - 1)
            assert obj.submission(b.id).outcome is Outcome.COMPLETED
            assert obj.submission(a.id).state is SubmissionState.QUEUED
            (fault,) = obj.space.faults.all()
            assert (fault.thread_id, fault.error_type, fault.recipients) == (
                "t-a", "StorageError", (a.id,))
            await obj.run_alarms()
            assert obj.submission(a.id).outcome is Outcome.COMPLETED
            assert obj.space.faults.all() == []

    asyncio.run(run())
