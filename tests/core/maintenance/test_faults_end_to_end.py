"""Recovery faults, recovery events and binding waits through the alarm alone.

These run the deployed ``Space`` in a :class:`~threadline.testing.SimulatedObject`: nothing but
fired alarms moves the work, and the alarm invariant is checked after every commit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from threadline import Application, Evicted, RecoveryEvent, Turn
from threadline.scheduling import read_state
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState


class Host:
    """The host side of the hook: what it received, and whether it currently refuses."""

    def __init__(self) -> None:
        self.events: list[RecoveryEvent] = []
        self.refusing = False
        self.refused = 0
        self.charges: list[Any] = []

    async def __call__(self, event: RecoveryEvent) -> None:
        if self.refusing:
            self.refused += 1
            raise ConnectionError("host outbox unavailable")
        self.events.append(event)

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(e.kind, e.submission_id) for e in self.events]


def make_app(host: Host, *, with_translator: bool = False) -> Application:
    app = Application()

    @app.agent("charger")
    async def charger(turn: Turn) -> Any:
        await turn.step("charge", lambda: host.charges.append(turn.input), effect="uncertain")
        return {"charged": turn.input}

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return {"got": turn.input}

    if with_translator:

        @app.agent("translator")
        async def translator(turn: Turn) -> Any:
            return {"translated": turn.input}

    app.on_recovery_event(host)
    return app


def _break_journal(obj: SimulatedObject, submission_id: str, error: str | None) -> None:
    """Make (or heal) an undecodable journal row: the Thread's recovery then fails to read it."""
    obj.storage.exec(
        "UPDATE tl_journal SET error_json = ? WHERE submission_id = ?", error, submission_id
    )


async def _lose_mid_step_with_a_broken_journal(obj: SimulatedObject, thread: str) -> str:
    """Admit a charge on ``thread`` and lose the object inside its uncertain step, leaving the
    step's journal row undecodable; return the submission id once its Thread is faulted."""
    sub = obj.admit(thread, "charger", 1)

    def lose(location: str) -> None:
        _break_journal(obj, sub.id, "{broken")
        raise Evicted(location)

    obj.failpoints.install("step:started", lose)
    # The lost pass had armed its crash fallback; the next one recovers the Thread.
    await obj.run_alarms(until=obj.clock.now_ms() + 4_000)
    return sub.id


def test_blocked_recovery_is_a_fault_other_threads_settle_and_it_clears() -> None:
    async def run() -> None:
        host = Host()
        async with SimulatedObject(make_app(host), check_alarm_invariant=True) as obj:
            charge = await _lose_mid_step_with_a_broken_journal(obj, "t-bad")
            fault = obj.space.faults.get("t-bad")
            assert fault is not None
            assert fault.recipients == (charge,)
            assert fault.error_type == "JSONDecodeError"
            assert obj.submission(charge).state is SubmissionState.RUNNING
            assert host.kinds() == [("created", charge)]

            good = obj.admit("t-good", "echo", "hi")
            await obj.run_alarms(until=obj.clock.now_ms() + 1_000)
            assert obj.submission(good.id).result == {"got": "hi"}
            assert fault.retry_at > obj.clock.now_ms()

            # Still broken at the retry: attempts grow, the host hears nothing new.
            await obj.run_alarms(until=fault.retry_at + 1)
            again = obj.space.faults.get("t-bad")
            assert again is not None and again.attempts == fault.attempts + 1
            assert again.first_failed_at == fault.first_failed_at
            assert host.kinds() == [("created", charge)]

            # Healed: recovery runs, the lost uncertain step becomes an Unknown Outcome (a
            # stable wait for an operator), the fault clears and the object goes quiet.
            _break_journal(obj, charge, None)
            await obj.run_alarms()
            assert obj.submission(charge).state is SubmissionState.UNKNOWN
            assert obj.space.faults.all() == []
            assert host.kinds() == [("created", charge), ("cleared", charge)]
            assert [e.seq for e in host.events] == [1, 2]
            state = read_state(obj.storage)
            assert state.recovery_event_ack == state.recovery_event_seq == 2
            # Lost after the journal said "started" and before the call: never run again.
            assert host.charges == []
            assert obj.alarm_at is None

    asyncio.run(run())


def test_failing_recovery_event_hook_is_retried_and_never_blocks_native_work() -> None:
    async def run() -> None:
        host = Host()
        host.refusing = True
        async with SimulatedObject(make_app(host), check_alarm_invariant=True) as obj:
            charge = await _lose_mid_step_with_a_broken_journal(obj, "t-bad")
            assert obj.space.faults.get("t-bad") is not None
            refused = host.refused
            assert refused >= 1

            # The host keeps refusing; new work on other Threads still settles.
            others = [obj.admit(f"t-{n}", "echo", n) for n in range(3)]
            await obj.run_alarms(until=obj.clock.now_ms() + 120_000)
            assert [obj.submission(s.id).result for s in others] == [
                {"got": 0}, {"got": 1}, {"got": 2},
            ]
            assert host.refused > refused
            assert host.events == []
            # The undelivered event keeps the object armed: it is retried, with backoff.
            assert obj.alarm_at is not None

            host.refusing = False
            _break_journal(obj, charge, None)
            await obj.run_alarms()
            assert host.kinds() == [("created", charge), ("cleared", charge)]
            assert obj.alarm_at is None

    asyncio.run(run())


def test_unregistered_agent_parks_reports_once_and_wakes_on_redeploy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def reports() -> int:
        return sum("parked until its agent" in r.getMessage() for r in caplog.records)

    async def run() -> None:
        host = Host()
        async with SimulatedObject(make_app(host), check_alarm_invariant=True) as obj:
            parked = obj.admit("t-x", "translator", "bonjour")
            follower = obj.admit("t-x", "echo", "after")
            elsewhere = obj.admit("t-y", "echo", "free")
            await obj.run_alarms()
            assert obj.submission(elsewhere.id).result == {"got": "free"}
            assert obj.submission(parked.id).state is SubmissionState.QUEUED
            assert obj.submission(follower.id).state is SubmissionState.QUEUED
            assert obj.space.bindings.parked_threads() == {"t-x"}
            assert host.kinds() == [("parked", parked.id)]
            assert host.events[0].agent == "translator"
            assert reports() == 1
            # Dormant: nothing keeps the alarm armed.
            assert obj.alarm_at is None

            # Evicted and restarted with the same deployment: still dormant, not reported again.
            await obj.evict()
            assert obj.alarm_at is None
            await obj.run_alarms(until=obj.clock.now_ms() + 3_600_000)
            assert host.kinds() == [("parked", parked.id)]
            assert reports() == 1
            assert obj.submission(parked.id).state is SubmissionState.QUEUED

            # A deployment that registers the agent: one new opportunity, and it all settles.
            dirty = read_state(obj.storage).dirty
            await obj.redeploy(make_app(host, with_translator=True))
            assert read_state(obj.storage).dirty == dirty + 1
            assert obj.alarm_at is not None
            await obj.run_alarms()
            assert obj.submission(parked.id).result == {"translated": "bonjour"}
            assert obj.submission(follower.id).result == {"got": "after"}
            assert obj.space.bindings.parked_threads() == frozenset()
            assert host.kinds() == [("parked", parked.id)]
            assert obj.alarm_at is None

    caplog.set_level(logging.ERROR, logger="threadline.maintenance")
    asyncio.run(run())


def test_an_undecodable_wait_is_a_fault_of_its_thread_only() -> None:
    async def run() -> None:
        host = Host()
        app = make_app(host)

        @app.agent("napper")
        async def napper(turn: Turn) -> Any:
            await turn.sleep(10)
            return {"woke": True}

        async with SimulatedObject(app, check_alarm_invariant=True) as obj:
            nap = obj.admit("t-bad", "napper", 1)
            await obj.run_alarms(until=obj.clock.now_ms() + 1_000)
            assert obj.submission(nap.id).state is SubmissionState.SUSPENDED
            obj.storage.exec(
                "UPDATE tl_waits SET payload_json = '{broken' WHERE submission_id = ?", nap.id
            )
            good = obj.admit("t-good", "echo", "hi")
            await obj.run_alarms(until=obj.clock.now_ms() + 12_000)
            assert obj.submission(good.id).result == {"got": "hi"}
            assert obj.space.faults.get("t-bad") is not None

    asyncio.run(run())
