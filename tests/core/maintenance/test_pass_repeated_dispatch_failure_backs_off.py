"""A dispatch that keeps failing (its claim refused again and again) is one fault that backs
off: each successful recovery in between does not clear it, so its attempts go on counting,
its retry grows 5 s, 10 s, ... 60 s, and the host hears one ``created``, a ``changed`` only
when the failure itself changes, and one ``cleared`` once the claim goes through."""

from __future__ import annotations

import asyncio
import contextvars

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.maintenance.faults import Fault, RecoveryEvent
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

CLAIM_SQL = "SET state = 'running'"
#: The same claim statement, named differently: its refusal reads as a different failure.
CLAIM_SQL_AGAIN = "UPDATE tl_submissions SET state = 'running'"
MINUTE = 60_000


def _app(events: list[RecoveryEvent]) -> Application:
    app = Application(RuntimeConfig())

    @app.agent("echo")
    async def echo(turn: object) -> str:
        return "echo"

    @app.on_recovery_event
    def hear(event: RecoveryEvent) -> None:
        events.append(event)

    return app


async def _flap(
    refusals: list[tuple[str, int]], span_ms: int
) -> tuple[list[Fault], list[RecoveryEvent], int, SimulatedObject]:
    """Refuse the claim as ``refusals`` say (statement, times), run the object for
    ``span_ms`` and return every fault record seen (one per failed attempt), the events,
    the start time and the (closed) object."""
    events: list[RecoveryEvent] = []
    clock = ManualClock()
    start = clock.now_ms()
    records: list[Fault] = []
    async with SimulatedObject(_app(events), clock=clock, check_alarm_invariant=True) as obj:
        for containing, times in refusals:
            obj.fail_statements(containing, times=times)
        submission = obj.admit("t", "echo", {})
        while obj.alarm_at is not None and clock.now_ms() - start < span_ms:
            await obj.run_alarms(until=obj.alarm_at)
            fault = obj.space.faults.get("t")
            if fault is not None and (not records or records[-1] != fault):
                records.append(fault)
        assert obj.submission(submission.id).outcome is Outcome.COMPLETED
        assert all(report.phase != "failed" for report in obj.reports)
    return records, events, start, obj


def _per_minute(times: list[int], start: int, minutes: int) -> list[int]:
    return [sum(1 for at in times if start + m * MINUTE <= at < start + (m + 1) * MINUTE)
            for m in range(minutes)]


def test_a_claim_refused_again_and_again_is_one_fault_whose_retry_grows() -> None:
    records, events, start, _ = asyncio.run(_flap([(CLAIM_SQL, 8)], 10 * MINUTE))

    assert [fault.attempts for fault in records] == list(range(1, 9))
    delays = [fault.retry_at - fault.last_failed_at for fault in records]
    assert delays == [5_000, 10_000, 20_000, 40_000, 60_000, 60_000, 60_000, 60_000]
    assert {fault.first_failed_at for fault in records} == {records[0].first_failed_at}
    # Failed attempts per simulated minute: 4 in the first (at 0.5, 5.5, 15.5, 35.5 s), then
    # one a minute at the cap (flapping made it 12 a minute, every minute).
    attempts = _per_minute([fault.last_failed_at for fault in records], start, 5)
    assert attempts == [4, 1, 1, 1, 1]
    # The host hears of the fault once and of its end once (flapping: 24 events a minute).
    assert [event.kind for event in events] == ["created", "cleared"]
    cleared = events[-1].fault
    assert cleared is not None and cleared.attempts == 8
    assert _per_minute([event.at for event in events], start, 6) == [1, 0, 0, 0, 0, 1]


def test_a_repeated_dispatch_failure_that_changes_is_reported_as_changed() -> None:
    records, events, _, _ = asyncio.run(
        _flap([(CLAIM_SQL_AGAIN, 2), (CLAIM_SQL, 2)], 5 * MINUTE))

    assert [fault.attempts for fault in records] == [1, 2, 3, 4]
    assert [fault.retry_at - fault.last_failed_at for fault in records] == [
        5_000, 10_000, 20_000, 40_000]
    assert [event.kind for event in events] == ["created", "changed", "cleared"]
    changed = events[1].fault
    assert changed is not None and changed.attempts == 3
    assert CLAIM_SQL_AGAIN not in changed.failure


def test_a_fault_whose_clear_is_lost_with_the_object_is_cleared_once_later() -> None:
    async def body() -> None:
        events: list[RecoveryEvent] = []
        clock = ManualClock()
        async with SimulatedObject(_app(events), clock=clock, check_alarm_invariant=True) as obj:
            obj.fail_statements(CLAIM_SQL, times=2)
            # Two refused claims record the fault twice; the third arrival is the clear that
            # follows the dispatch that went through: the object is lost right before it.
            crash = obj.crash_at("maintenance:recovery-status:before", occurrence=3)
            submission = obj.admit("t", "echo", {})
            await obj.run_alarms()

            assert crash.fired and obj.evictions == 1
            assert obj.submission(submission.id).outcome is Outcome.COMPLETED
            assert obj.space.faults.all() == []
            assert [event.kind for event in events] == ["created", "cleared"]
            cleared = events[-1].fault
            assert cleared is not None and cleared.attempts == 2
            assert obj.alarm_at is None

    asyncio.run(body())


def test_a_lifted_fault_stays_lifted_when_the_pass_reads_all_open_work_again() -> None:
    # t-x's fault is due: the pass recovers it (lifting the fault) and its head waits for the
    # one slot, taken by t-a. A producer naming no Thread makes the pass read all open work
    # again meanwhile; t-x is still not faulted for this pass, so it runs once the slot frees
    # (instead of waiting for the next pass) and its fault is cleared.
    async def run() -> None:
        clock = ManualClock()
        app = Application(RuntimeConfig(native_concurrency=1))
        holder: list[SimulatedObject] = []

        @app.agent("echo")
        async def echo(turn: object) -> str:
            return "echo"

        @app.agent("slow")
        async def slow(turn: object) -> str:
            await clock.sleep_until(clock.now_ms() + 1_000)
            asyncio.get_running_loop().call_soon(
                lambda: holder[0].runtime.gate.mutate(lambda: None),
                context=contextvars.Context())
            await clock.sleep_until(clock.now_ms() + 1_000)
            return "slow"

        async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
            holder.append(obj)
            x = obj.admit("t-x", "echo", {})
            fault = obj.space.faults.record("t-x", failure="earlier", error_type="E",
                                            recipients=[x.id])
            clock.set(fault.retry_at)
            a = obj.admit("t-a", "slow", {})
            reports = await obj.run_alarms()
            assert obj.submission(a.id).outcome is Outcome.COMPLETED
            assert obj.submission(x.id).outcome is Outcome.COMPLETED
            assert reports[0].settled == 2
            assert obj.space.faults.all() == []

    asyncio.run(run())
