"""``turn.submit``: an agent submits into its own space, committed with its Attempt's facts and
made once across replays; what it submits runs without anything else waking the object."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from delayed_support import CONFIG, MINUTE, START, pending, settled

from threadline import Application, ManualClock, Turn
from threadline.testing import Effects, SimulatedObject
from threadline.threads.model import Outcome, ScheduledSubmission


def _app(effects: Effects, calls: list[dict[str, Any]]) -> Application:
    app = Application(CONFIG)

    @app.agent("planner")
    async def planner(turn: Turn) -> Any:
        made = []
        for call in calls:
            made.append(await turn.submit(**call))
        # A step after the submissions: a crash here replays them.
        await turn.step("after", lambda: effects.hit("after"))
        return made

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return await turn.step(
            "say", lambda: effects.hit(f"echo:{turn.thread_id}:{turn.input}"))

    return app


async def _made_once(crash: str, occurrence: int) -> None:
    effects = Effects()
    calls: list[dict[str, Any]] = [
        {"thread": "other", "input": "now", "agent": "echo"},
        {"thread": "other", "input": "later", "agent": "echo",
         "not_before": timedelta(minutes=5)},
    ]
    clock = ManualClock(START)
    async with SimulatedObject(_app(effects, calls), clock=clock,
                               check_alarm_invariant=True) as obj:
        obj.crash_at(crash, occurrence)
        sub = obj.admit("plan", "planner", None)
        await obj.run_alarms(until=START + MINUTE)
        assert obj.crashes[0].fired and obj.evictions >= 1
        now_id, later_id = settled(obj, sub.id).result
        assert [s.id for s in obj.submissions("other")] == [now_id]
        scheduled = obj.find(later_id)
        assert isinstance(scheduled, ScheduledSubmission)
        # Five minutes after the Attempt that made it (the first, before the crash).
        assert 5 * MINUTE < scheduled.not_before - START < 6 * MINUTE
        assert pending(obj) == 1
        await obj.run_alarms()
        assert [s.id for s in obj.submissions("other")] == [now_id, later_id]
        assert effects.count("echo:other:now") == 1 and effects.count("echo:other:later") == 1
        assert settled(obj, later_id).created_at == scheduled.created_at


@pytest.mark.parametrize(("crash", "occurrence"), [
    ("step:started", 1),          # after both submissions committed, before the step
    ("maintenance:dirty:after", 3),  # 3rd gate commit: admission, claim, first submission
])
def test_turn_submit_is_made_once_across_a_crash_and_replay(crash: str, occurrence: int) -> None:
    asyncio.run(_made_once(crash, occurrence))


async def _runs_alone() -> None:
    effects = Effects()
    calls: list[dict[str, Any]] = [{"thread": f"t{n}", "input": n} for n in range(4)]
    clock = ManualClock(START)
    async with SimulatedObject(_app(effects, calls), clock=clock,
                               check_alarm_invariant=True) as obj:
        # Threads the running pass never read: their new input must not be certified away.
        for n in range(4):
            obj.admit(f"t{n}", "echo", "first")
        await obj.run_alarms()
        sub = obj.admit("plan", "planner", None)
        await obj.run_alarms()
        made = settled(obj, sub.id).result
        for n, submission_id in enumerate(made):
            done = settled(obj, submission_id)
            # No agent named: the Thread's latest agent.
            assert (done.thread_id, done.agent, done.seq) == (f"t{n}", "echo", 2)
            assert done.idempotency_key == f"{sub.id}:submit" + ("" if n == 0 else f".{n + 1}")
        assert obj.alarm_at is None


def test_what_turn_submit_admits_runs_without_anything_else_waking_the_object() -> None:
    asyncio.run(_runs_alone())


async def _refused(call: dict[str, Any], message: str) -> None:
    effects = Effects()
    clock = ManualClock(START)
    async with SimulatedObject(_app(effects, [call]), clock=clock,
                               check_alarm_invariant=True) as obj:
        obj.admit("x", "echo", "taken", "k")
        sub = obj.admit("plan", "planner", None)
        await obj.run_alarms()
        done = settled(obj, sub.id)
        assert done.outcome is Outcome.FAILED and message in done.error["message"]
        assert done.attempts == 1  # refused for good, not retried
        assert pending(obj) == 0 and len(obj.submissions()) == 2


@pytest.mark.parametrize(("call", "message"), [
    ({"thread": "x", "input": "other", "key": "k"}, "already used with other input"),
    ({"thread": "y", "input": 1, "agent": "nobody"}, "not registered"),
    ({"thread": "y", "input": 1, "not_before": timedelta(days=367)}, "366 days"),
    ({"thread": "y", "input": 1, "not_before": timedelta(seconds=-1)}, "negative"),
    ({"thread": "y/z", "input": 1}, "thread must match"),
])
def test_a_refused_turn_submit_fails_the_attempt_for_good(
    call: dict[str, Any], message: str
) -> None:
    asyncio.run(_refused(call, message))


async def _replayed_key() -> None:
    effects = Effects()
    calls: list[dict[str, Any]] = [{"thread": "x", "input": "taken", "key": "k"}]
    clock = ManualClock(START)
    async with SimulatedObject(_app(effects, calls), clock=clock) as obj:
        first = obj.admit("x", "echo", "taken", "k")
        sub = obj.admit("plan", "planner", None)
        await obj.run_alarms()
        assert settled(obj, sub.id).result == [first.id]
        assert len(obj.submissions("x")) == 1


def test_turn_submit_with_a_key_the_thread_holds_for_the_same_input_answers_with_it() -> None:
    asyncio.run(_replayed_key())
