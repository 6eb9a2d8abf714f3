"""Per-agent limits at their edges: permits freed one at a time, storage refusing the starts'
rows, several limited agents waiting at once, and the turn of a Thread passed over."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from threadline import Application, ManualClock, Rate, RuntimeConfig, Turn
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

START = 1_700_000_000_000


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Seen:
    """When each Attempt started, per agent and per Thread, and how many ran at once."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.starts: dict[str, list[int]] = {}
        self.threads: list[str] = []
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    async def call(self, agent: str, thread: str, ms: int) -> None:
        self.starts.setdefault(agent, []).append(self.clock.now_ms() - START)
        self.threads.append(thread)
        self.running[agent] = self.running.get(agent, 0) + 1
        self.peak[agent] = max(self.peak.get(agent, 0), self.running[agent])
        try:
            if ms:
                await self.clock.sleep_until(self.clock.now_ms() + ms)
        finally:
            self.running[agent] -= 1


def app_with(seen: Seen, **agents: dict[str, Any]) -> Application:
    """One agent per keyword; its dict holds ``ms`` (how long an Attempt takes, or a dict
    of ms by the input's ``ms``) and its limits."""
    app = Application(RuntimeConfig(native_concurrency=64))
    for name, spec in agents.items():
        limits = {key: value for key, value in spec.items() if key != "ms"}
        default = spec.get("ms", 0)

        def make(agent: str, ms: int) -> Any:
            async def body(turn: Turn) -> Any:
                data = turn.input if isinstance(turn.input, dict) else {}
                await seen.call(agent, turn.thread_id, int(data.get("ms", ms)))
                return "ok"
            return body

        app.agent(name, **limits)(make(name, default))
    return app


def test_one_attempt_ending_frees_one_permit_while_the_others_still_run() -> None:
    async def body() -> None:
        clock = ManualClock(START)
        seen = Seen(clock)
        app = app_with(seen, chat={"concurrency": 2})
        async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
            subs = [obj.admit("a", "chat", {"ms": 1_000}), obj.admit("b", "chat", {"ms": 5_000})]
            subs += [obj.admit(f"c{n}", "chat", {"ms": 5_000}) for n in range(4)]
            await obj.run_alarms()
            assert all(obj.submission(s.id).outcome is Outcome.COMPLETED for s in subs)
            # Never more than two at once, though one of them always still runs when a
            # permit frees.
            assert seen.peak["chat"] == 2
    run(body())


def test_a_thread_passed_over_for_a_permit_keeps_its_turn_when_other_threads_are_served(
) -> None:
    async def body() -> None:
        clock = ManualClock(START)
        seen = Seen(clock)
        app = app_with(seen, chat={"rate": Rate(1, per=timedelta(seconds=1))}, other={})
        async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
            for n in range(4):
                obj.admit("a", "chat", {"n": n})
            late = obj.admit("b", "chat", {})
            obj.admit("z", "other", {})
            t0 = obj.alarm_at
            assert t0 is not None
            for window in range(4):
                await obj.run_alarms(until=t0 + window * 1_000 + 500)
                # A busy Thread of an agent with no limit is served between the windows.
                obj.admit("z", "other", {"w": window})
            await obj.run_alarms()
            chats = [thread for thread in seen.threads if thread != "z"]
            # Round-robin between the two waiting Threads: b is not kept behind all of a.
            assert chats.index("b") == 1
            assert obj.submission(late.id).outcome is Outcome.COMPLETED
    run(body())


def test_storage_refusing_a_start_row_leaves_the_rate_held_in_memory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        clock = ManualClock(START)
        seen = Seen(clock)
        app = app_with(seen, chat={"rate": Rate(1, per=timedelta(minutes=1))})
        async with SimulatedObject(app, clock=clock) as obj:
            refused = obj.fail_statements("INSERT INTO tl_agent_starts")
            subs = [obj.admit(thread, "chat", {}) for thread in ("a", "b")]
            t0 = obj.alarm_at
            assert t0 is not None
            await obj.run_alarms(until=t0 + 59_999)
            assert refused.remaining == 0
            # No row, yet the start counts: the second Thread waits out the window.
            assert obj.storage.exec("SELECT COUNT(*) FROM tl_agent_starts").scalar() == 0
            assert len(seen.starts["chat"]) == 1
            await obj.run_alarms()
            assert seen.starts["chat"][1] - seen.starts["chat"][0] == 60_000
            assert all(obj.submission(s.id).outcome is Outcome.COMPLETED for s in subs)
    with caplog.at_level(logging.ERROR):
        run(body())
    assert any("could not store a start of agent 'chat'" in r.getMessage()
               for r in caplog.records)


def test_storage_refusing_the_recent_starts_starts_an_empty_window_that_still_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        clock = ManualClock(START)
        seen = Seen(clock)
        app = app_with(seen, chat={"rate": Rate(1, per=timedelta(minutes=1))})
        async with SimulatedObject(app, clock=clock) as obj:
            refused = obj.fail_statements("FROM tl_agent_starts WHERE agent")
            for thread in ("a", "b"):
                obj.admit(thread, "chat", {})
            t0 = obj.alarm_at
            assert t0 is not None
            await obj.run_alarms(until=t0 + 59_999)
            assert refused.remaining == 0
            assert len(seen.starts["chat"]) == 1
            # The start taken on the empty window is stored and held.
            assert obj.storage.exec("SELECT COUNT(*) FROM tl_agent_starts").scalar() == 1
            await obj.run_alarms()
            assert len(seen.starts["chat"]) == 2
    with caplog.at_level(logging.ERROR):
        run(body())
    assert any("could not read the recent starts of agent 'chat'" in r.getMessage()
               for r in caplog.records)


def test_the_pass_wakes_for_the_earliest_of_several_rate_limited_agents() -> None:
    async def body() -> None:
        clock = ManualClock(START)
        seen = Seen(clock)
        app = app_with(seen, slow={"ms": 30_000},
                       hourly={"rate": Rate(1, per=timedelta(hours=1))},
                       often={"rate": Rate(1, per=timedelta(seconds=2))})
        async with SimulatedObject(app, clock=clock) as obj:
            obj.admit("s", "slow", {})
            for n in range(2):
                obj.admit(f"h{n}", "hourly", {})
                obj.admit(f"o{n}", "often", {})
            t0 = obj.alarm_at
            assert t0 is not None
            await obj.run_alarms(until=t0 + 10_000)
            # While the slow Attempt holds the pass, the second start of the agent whose
            # window frees first is not kept waiting for the other agent's window.
            assert [at - seen.starts["often"][0] for at in seen.starts["often"]] == [0, 2_000]
            assert len(seen.starts["hourly"]) == 1
    run(body())
