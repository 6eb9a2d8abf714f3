"""FIFO and waits: a recovered Unknown Outcome steps aside so later input runs; stable external
waits (approval, unknown, binding wait) keep no alarm and their queued followers stay dormant;
a timer wait arms its own due time; a head whose agent is unregistered is parked until the
registry changes."""

from __future__ import annotations

from typing import Any

import pytest
from pass_support import CONFIG, Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.scheduling import read_state
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState


def _app(*, with_other: bool = True) -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        return {"echo": turn.input}

    @app.agent("ask")
    async def ask(turn: Any) -> Any:
        decision = await turn.approval("go")
        return {"approved": decision.approved}

    @app.agent("nap")
    async def nap(turn: Any) -> Any:
        await turn.sleep(30)
        return "rested"

    @app.agent("risky")
    async def risky(turn: Any) -> Any:
        async def send() -> str:
            return "sent"

        return await turn.step("send", send, effect="uncertain")

    if with_other:
        @app.agent("other")
        async def other(turn: Any) -> Any:
            return "other"

    return app


def test_pass_keeps_no_alarm_for_an_approval_and_its_follower_stays_dormant(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, _app)
        await obj.start()
        await obj.run()
        head = obj.admit("t", {}, agent="ask")
        follower = obj.admit("t", {"n": 2})
        reports = await obj.run()
        assert len(reports) == 1
        assert obj.get(head.id).state is SubmissionState.SUSPENDED
        assert obj.get(follower.id).state is SubmissionState.QUEUED
        assert raw_storage.known_alarm() is None
        obj.space.runtime.ledger.decide_approval(head.id, "go", approved=True)
        await obj.run()
        assert obj.get(head.id).result == {"approved": True}
        assert obj.get(follower.id).state is SubmissionState.SETTLED

    run(body())


def test_pass_arms_a_timer_wait_at_its_own_due_time(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, _app)
        await obj.start()
        await obj.run()
        sub = obj.admit("t", {}, agent="nap")
        clock.advance(1_000)
        await obj.fire()
        due = clock.now_ms() + 30_000
        assert obj.get(sub.id).state is SubmissionState.SUSPENDED
        assert raw_storage.known_alarm() == due
        reports = await obj.run()
        assert clock.now_ms() == due and len(reports) == 1
        assert obj.get(sub.id).result == "rested"
        assert raw_storage.known_alarm() is None

    run(body())


def test_pass_lets_later_input_run_past_a_recovered_unknown_outcome(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, _app)
        await obj.start()
        await obj.run()
        head = obj.admit("t", {}, agent="risky")
        follower = obj.admit("t", {"n": 2})
        obj.failpoints.evict_at("step:started")
        with pytest.raises(Evicted):
            await obj.fire()
        await obj.evict()
        await obj.run()
        assert obj.get(head.id).state is SubmissionState.UNKNOWN
        assert obj.get(follower.id).outcome is Outcome.COMPLETED
        assert raw_storage.known_alarm() is None  # awaiting an operator keeps no alarm
        obj.space.runtime.ledger.resolve_unknown(head.id, "accept", "sent")
        await obj.run()
        assert obj.get(head.id).result == "sent"

    run(body())


def test_pass_parks_a_head_whose_agent_is_unregistered_until_the_registry_changes(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        registered = {"other": False}
        obj = Obj(raw_storage, clock, lambda: _app(with_other=registered["other"]))
        await obj.start()
        await obj.run()
        head = obj.admit("t", {}, agent="other")
        follower = obj.admit("t", {"n": 2})
        elsewhere = obj.admit("u", {"n": 3})
        await obj.run()
        assert obj.get(head.id).state is SubmissionState.QUEUED
        assert obj.get(follower.id).state is SubmissionState.QUEUED
        assert obj.get(elsewhere.id).state is SubmissionState.SETTLED
        assert obj.space.bindings.parked_threads() == frozenset({"t"})
        assert raw_storage.known_alarm() is None  # dormant: nothing retried every pass
        events = read_state(raw_storage).recovery_event_seq
        assert events == 1  # the parking was reported once, as a recovery-style event
        await obj.evict()  # same deployment: still dormant, not reported again
        await obj.run()
        assert obj.get(head.id).state is SubmissionState.QUEUED
        assert read_state(raw_storage).recovery_event_seq == events
        registered["other"] = True
        await obj.evict()  # a deployment that registers the agent
        await obj.run()
        assert obj.get(head.id).result == "other"
        assert obj.get(follower.id).state is SubmissionState.SETTLED

    run(body())
