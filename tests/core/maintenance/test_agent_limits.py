"""Per-agent limits: ``@app.agent(..., concurrency=N, rate=Rate(limit, per))`` held by the pass
across the object's Threads, with waiting heads dormant until a permit frees."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

import pytest

from threadline import Application, ManualClock, Rate, RuntimeConfig, Turn
from threadline.api.openapi import with_agents
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, SubmissionState

START = 1_700_000_000_000
CALL_MS = 2_000


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


class Calls:
    """What the agents saw: when each Attempt started (ms after the first alarm after the
    first admission, ``origin``), and how many ran at once."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.origin = START
        self.starts: dict[str, list[int]] = {}
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    async def call(self, agent: str, ms: int) -> None:
        self.starts.setdefault(agent, []).append(self.clock.now_ms() - self.origin)
        self.running[agent] = self.running.get(agent, 0) + 1
        self.peak[agent] = max(self.peak.get(agent, 0), self.running[agent])
        try:
            if ms:
                await self.clock.sleep_until(self.clock.now_ms() + ms)
        finally:
            self.running[agent] -= 1


def first_alarm(obj: SimulatedObject) -> int:
    at = obj.alarm_at
    assert at is not None
    return at


def build(calls: Calls, *, concurrency: int | None = None, rate: Rate | None = None,
          ms: int = CALL_MS) -> Application:
    app = Application(RuntimeConfig(native_concurrency=64))

    @app.agent("chat", concurrency=concurrency, rate=rate)
    async def chat(turn: Turn) -> Any:
        await calls.call("chat", ms)
        return "answered"

    @app.agent("other")
    async def other(turn: Turn) -> Any:
        await calls.call("other", ms)
        return "done"

    return app


def test_an_agent_with_concurrency_runs_at_most_that_many_attempts_at_once() -> None:
    async def body() -> None:
        clock = ManualClock(START)
        calls = Calls(clock)
        async with SimulatedObject(build(calls, concurrency=3), clock=clock,
                                   check_alarm_invariant=True) as obj:
            subs = [obj.admit(f"c{n}", "chat", {}) for n in range(10)]
            others = [obj.admit(f"o{n}", "other", {}) for n in range(6)]
            calls.origin = first_alarm(obj)
            await obj.run_alarms()
            assert all(obj.submission(s.id).outcome is Outcome.COMPLETED
                       for s in subs + others)
            assert calls.peak["chat"] == 3
            # Each permit is taken again as soon as an Attempt ends: four rounds of 2 s.
            assert calls.starts["chat"] == [0, 0, 0, 2_000, 2_000, 2_000, 4_000, 4_000,
                                            4_000, 6_000]
            # The limit is the agent's: another agent runs beside it, all at once.
            assert calls.peak["other"] == 6
            assert calls.starts["other"] == [0] * 6

    run(body())


def test_an_agent_with_a_rate_starts_at_most_limit_attempts_in_any_window() -> None:
    async def body() -> None:
        clock = ManualClock(START)
        calls = Calls(clock)
        app = build(calls, rate=Rate(2, per=timedelta(seconds=10)), ms=0)
        async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
            subs = [obj.admit(f"c{n}", "chat", {}) for n in range(5)]
            t0 = calls.origin = first_alarm(obj)
            first = await obj.run_alarms(until=t0)
            assert calls.starts["chat"] == [0, 0]
            # The held heads cost no alarm before the window frees a start.
            assert obj.alarm_at == t0 + 10_000
            assert sum(report.dispatched for report in first) == 2
            await obj.run_alarms()
            assert calls.starts["chat"] == [0, 0, 10_000, 10_000, 20_000]
            assert all(obj.submission(s.id).outcome is Outcome.COMPLETED
                       for s in subs)
            # One pass per window, no pass in between.
            assert len(obj.reports) <= 4

    run(body())


def test_a_rate_frees_starts_during_a_pass_that_is_still_running_other_attempts() -> None:
    async def body() -> None:
        clock = ManualClock(START)
        calls = Calls(clock)
        app = build(calls, rate=Rate(1, per=timedelta(seconds=1)), ms=0)

        @app.agent("slow")
        async def slow(turn: Turn) -> Any:
            await calls.call("slow", 5_000)
            return "slow"

        async with SimulatedObject(app, clock=clock) as obj:
            obj.admit("s", "slow", {})
            for n in range(3):
                obj.admit(f"c{n}", "chat", {})
            calls.origin = first_alarm(obj)
            await obj.run_alarms()
            # Started when its window freed, while the slow Attempt held the pass.
            assert calls.starts["chat"] == [0, 1_000, 2_000]
            assert len(obj.reports) == 1

    run(body())


def test_the_rate_window_survives_an_eviction() -> None:
    async def body() -> None:
        clock = ManualClock(START)
        calls = Calls(clock)
        app = build(calls, rate=Rate(2, per=timedelta(minutes=1)), ms=0)
        async with SimulatedObject(app, clock=clock) as obj:
            obj.admit("a", "chat", {})
            obj.admit("b", "chat", {})
            t0 = calls.origin = first_alarm(obj)
            await obj.run_alarms()
            assert calls.starts["chat"] == [0, 0]
            clock.advance(5_000)
            await obj.evict()
            late = obj.admit("c", "chat", {})
            await obj.run_alarms(until=t0 + 59_999)
            assert obj.submission(late.id).state is SubmissionState.QUEUED
            await obj.run_alarms()
            assert calls.starts["chat"] == [0, 0, 60_000]

    run(body())


def test_a_rate_holds_the_threads_fifo_and_stores_a_bounded_number_of_starts() -> None:
    async def body() -> None:
        clock = ManualClock(START)
        calls = Calls(clock)
        app = build(calls, rate=Rate(3, per=timedelta(seconds=1)), ms=0)
        async with SimulatedObject(app, clock=clock) as obj:
            subs = [obj.admit("one", "chat", {"n": n}) for n in range(12)]
            await obj.run_alarms()
            settled = [obj.submission(s.id).settled_at for s in subs]
            assert settled == sorted(settled)
            assert len(calls.starts["chat"]) == 12
            for at in calls.starts["chat"]:
                assert sum(1 for other in calls.starts["chat"] if at <= other < at + 1_000) <= 3
            rows = obj.storage.exec("SELECT COUNT(*) FROM tl_agent_starts").scalar()
            assert rows is not None and 1 <= int(rows) <= 4

    run(body())


def test_an_aborted_head_left_terminalizing_by_a_crash_settles_without_waiting_for_a_permit(
) -> None:
    async def body() -> None:
        clock = ManualClock(START)
        calls = Calls(clock)
        app = build(calls, rate=Rate(1, per=timedelta(hours=1)), ms=10_000)
        async with SimulatedObject(app, clock=clock) as obj:
            sub = obj.admit("a", "chat", {})
            t0 = calls.origin = first_alarm(obj)
            obj.crash_at("settle:before")

            async def abort_mid_attempt() -> None:
                await clock.sleep_until(t0 + 1_000)
                obj.abort(sub.id, "no longer wanted")

            aborter = asyncio.ensure_future(abort_mid_attempt())
            await obj.run_alarms(until=t0 + 60_000)
            await aborter
            assert obj.evictions == 1
            assert obj.submission(sub.id).outcome is Outcome.ABORTED
            assert calls.starts["chat"] == [0]

    run(body())


def test_an_abort_of_a_held_head_settles_it_at_once_without_a_permit() -> None:
    async def body() -> None:
        clock = ManualClock(START)
        calls = Calls(clock)
        app = build(calls, rate=Rate(1, per=timedelta(hours=1)), ms=0)
        async with SimulatedObject(app, clock=clock) as obj:
            obj.admit("a", "chat", {})
            held = obj.admit("b", "chat", {})
            t0 = calls.origin = first_alarm(obj)
            await obj.run_alarms(until=t0)
            assert obj.submission(held.id).state is SubmissionState.QUEUED
            obj.abort(held.id, "no longer wanted")
            await obj.run_alarms(until=t0 + 5_000)
            assert obj.submission(held.id).outcome is Outcome.ABORTED
            assert calls.starts["chat"] == [0]

    run(body())


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"concurrency": 0}, ValueError),
    ({"concurrency": 257}, ValueError),
    ({"concurrency": True}, TypeError),
    ({"concurrency": 2.0}, TypeError),
    ({"rate": (2, 60)}, TypeError),
])
def test_a_bad_limit_is_refused_when_the_agent_is_declared(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    app = Application()
    with pytest.raises(error):
        @app.agent("chat", **kwargs)
        async def chat(turn: Turn) -> Any:
            return None
    assert "chat" not in app.agents


@pytest.mark.parametrize(("limit", "per", "error"), [
    (0, timedelta(minutes=1), ValueError),
    (10_001, timedelta(minutes=1), ValueError),
    (True, timedelta(minutes=1), TypeError),
    (5, 60, TypeError),
    (5, timedelta(milliseconds=999), ValueError),
    (5, timedelta(days=1, milliseconds=1), ValueError),
    (5, timedelta(seconds=1, microseconds=500), ValueError),
])
def test_a_rate_out_of_bounds_is_refused(limit: Any, per: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        Rate(limit, per=per)


def test_a_rate_at_its_bounds_is_taken() -> None:
    assert Rate(1, per=timedelta(seconds=1)).per_ms == 1_000
    assert Rate(10_000, per=timedelta(days=1)).per_ms == 86_400_000


def test_the_openapi_document_shows_each_agents_limits() -> None:
    app = build(Calls(ManualClock(START)), concurrency=4,
                rate=Rate(60, per=timedelta(minutes=1)))
    document = with_agents({"components": {"schemas": {}}}, app.agents)
    agents = {agent["name"]: agent for agent in document["x-agents"]}
    assert agents["chat"]["concurrency"] == 4
    assert agents["chat"]["rate"] == {"limit": 60, "per_ms": 60_000}
    assert agents["other"]["concurrency"] is None and agents["other"]["rate"] is None
