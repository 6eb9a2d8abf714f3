"""An agent that swallows its cancellation cannot hold a pass, nor commit after it is abandoned."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.testing import Effects, ThreadHarness
from threadline.threads.model import SubmissionState
from threadline.threads.signals import LeaseLost
from threadline.threads.turn import Turn

MakeHarness = Callable[..., ThreadHarness]

CONFIG = RuntimeConfig(attempt_timeout_ms=60_000, cancel_grace_ms=2_000)


class Stubborn:
    """An agent that catches its cancellation and keeps waiting until ``resume`` is set, then
    tries more durable work; what became of that work is kept for the test to read."""

    def __init__(self, effects: Effects) -> None:
        self.effects = effects
        self.resume = asyncio.Event()
        self.cancelled = 0
        self.late: BaseException | None = None
        self.late_effects: list[str] = []

    def build(self, config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("stubborn")
        async def stubborn(turn: Turn) -> Any:
            await turn.step("first", lambda: self.effects.hit("first"))
            try:
                if not self.resume.is_set():
                    await asyncio.Event().wait()  # a hung call
            except asyncio.CancelledError:
                self.cancelled += 1
                await self.resume.wait()  # swallowed: it goes on waiting
            try:
                await turn.step("late", lambda: self.effects.hit("late"))
                await turn.emit({"late": True})
            except BaseException as exc:
                self.late = exc
                raise
            return "late result"

        return app


async def spin(times: int = 50) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


def journal_keys(h: ThreadHarness, submission_id: str) -> list[str]:
    rows = h.storage.exec("SELECT step_key FROM tl_journal WHERE submission_id = ? ORDER BY"
                          " step_key", submission_id)
    return [row["step_key"] for row in rows]


def test_a_timed_out_agent_that_swallows_cancellation_is_abandoned_after_the_grace(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    agent = Stubborn(effects)
    h = make_harness(agent.build, CONFIG)
    sub = h.admit("t", None, agent="stubborn")

    async def scenario() -> None:
        task = asyncio.ensure_future(h.runtime.process_thread_head("t"))
        await spin()
        claimed = h.get(sub.id)
        assert claimed.state is SubmissionState.RUNNING
        clock.advance(60_000)  # the Attempt's bound: the agent is cancelled
        await spin()
        assert agent.cancelled == 1
        assert not task.done(), "the grace has not passed yet"
        clock.advance(1_999)
        await spin()
        assert not task.done()
        clock.advance(1)
        await spin()
        assert task.done(), "the pass still waits on an agent that ignored its cancellation"
        assert task.result() is None
        assert h.runtime.abandoned == 1
        released = h.get(sub.id)
        assert released.state is SubmissionState.READY
        assert released.revision > claimed.revision  # the abandoned claim is stale
        assert released.error is not None and released.error["type"] == "AttemptTimeout"
        assert "cancel_grace_ms (2000)" in released.error["message"]
        # The abandoned agent wakes up and tries to go on: nothing of it commits.
        writes = h.storage.meter.reading().rows_written
        agent.resume.set()
        await spin()
        assert isinstance(agent.late, LeaseLost)
        assert h.runtime.abandoned == 0
        assert h.storage.meter.reading().rows_written == writes
        assert h.get(sub.id) == released
        assert journal_keys(h, sub.id) == ["step:first"]
        assert h.storage.exec("SELECT COUNT(*) AS n FROM tl_history").scalar() == 0
        assert effects.count("late") == 0  # it does not even start its next step

    asyncio.run(scenario())


def test_an_abandoned_claim_is_stale_even_for_a_turn_that_was_not_revoked(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With revocation switched off, the claim's revision alone still refuses every write."""
    monkeypatch.setattr(Turn, "revoke", lambda self: None)
    agent = Stubborn(effects)
    h = make_harness(agent.build, CONFIG)
    sub = h.admit("t", None, agent="stubborn")

    async def scenario() -> None:
        task = asyncio.ensure_future(h.runtime.process_thread_head("t"))
        await spin()
        clock.advance(60_000)
        await spin()
        clock.advance(2_000)
        await spin()
        assert task.done() and task.result() is None
        released = h.get(sub.id)
        agent.resume.set()
        await spin()
        # Its step function ran (nothing stopped it at the boundary), but the journal write
        # was fenced by the claim's revision, which the release moved on.
        assert isinstance(agent.late, LeaseLost)
        assert effects.count("late") == 1
        assert journal_keys(h, sub.id) == ["step:first"]
        assert h.get(sub.id) == released

    asyncio.run(scenario())


def test_an_outside_cancellation_waits_at_most_the_grace_then_propagates(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    agent = Stubborn(effects)
    h = make_harness(agent.build, CONFIG)
    sub = h.admit("t", None, agent="stubborn")

    async def scenario() -> None:
        task = asyncio.ensure_future(h.runtime.process_thread_head("t"))
        await spin()
        claimed = h.get(sub.id)
        task.cancel()  # the pass's event deadline
        await spin()
        assert agent.cancelled == 1 and not task.done()
        clock.advance(2_000)
        await spin()
        assert task.done(), "the pass still waits on an agent that ignored its cancellation"
        with pytest.raises(asyncio.CancelledError):
            task.result()
        # Nothing was written: the claim is left running for recovery, at the same revision,
        # and the revoked Turn keeps the abandoned agent from using it.
        assert h.get(sub.id) == claimed
        agent.resume.set()
        await spin()
        assert isinstance(agent.late, LeaseLost)
        assert effects.count("late") == 0
        assert h.get(sub.id) == claimed
        assert journal_keys(h, sub.id) == ["step:first"]

    asyncio.run(scenario())
    # Recovery takes the claim back once its lease expires, and the agent runs again.
    clock.advance(h.app.config.lease_ms)
    agent.resume.set()
    h.evict()
    asyncio.run(h.drive())
    done = h.get(sub.id)
    assert done.state is SubmissionState.SETTLED and done.result == "late result"
    assert effects.count("first") == 1


def test_an_agent_that_honours_cancellation_is_not_abandoned(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("hang")
        async def hang(turn: Turn) -> Any:
            await asyncio.Event().wait()

        return app

    h = make_harness(build, CONFIG)
    sub = h.admit("t", None, agent="hang")

    async def scenario() -> None:
        task = asyncio.ensure_future(h.runtime.process_thread_head("t"))
        await spin()
        clock.advance(60_000)  # no grace needed: it unwinds at once
        await spin()
        assert task.done() and task.result() is None
        assert h.runtime.abandoned == 0

    asyncio.run(scenario())
    timed_out = h.get(sub.id)
    assert timed_out.error is not None and "cancel_grace_ms" not in timed_out.error["message"]


def test_the_grace_is_bounded_in_config() -> None:
    assert RuntimeConfig().cancel_grace_ms == 5_000
    with pytest.raises(ValueError):
        RuntimeConfig(cancel_grace_ms=60_001)
    with pytest.raises(ValueError):
        RuntimeConfig(cancel_grace_ms=-1)


def test_the_grace_after_the_event_deadline_fits_the_platform_limit() -> None:
    RuntimeConfig(event_deadline_ms=894_999, yield_after_ms=600_000)
    with pytest.raises(ValueError, match=r"event_deadline_ms \+ cancel_grace_ms"):
        RuntimeConfig(event_deadline_ms=895_000, yield_after_ms=600_000)
    RuntimeConfig(event_deadline_ms=899_999, yield_after_ms=600_000, cancel_grace_ms=0)
