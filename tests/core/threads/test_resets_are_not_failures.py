"""A reset of the object is not the agent's failure.

Each test runs a whole object (``SimulatedObject``: the alarm, the maintenance pass, recovery)
and loses it from inside a step, as a deploy, an eviction or a crash under load would: the step
raises ``Evicted``, the handler is lost, and a new incarnation starts over the same file. A
loss spends no ``max_attempts``; losses in a row at one journal position are bounded by
``max_consecutive_losses`` instead, which ends a crash loop. Losses are in a row only while no
step finishes and no Attempt ends otherwise (suspends, yields, fails, settles, steps aside as
an Unknown Outcome) between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from threadline import Application, ManualClock, Turn
from threadline.config import RuntimeConfig
from threadline.errors import Evicted
from threadline.testing import Effects, SimulatedObject
from threadline.threads.model import Outcome, Submission, SubmissionState

START = 1_700_000_000_000


def _resetting(effects: Effects, *, resets: int | None, config: RuntimeConfig) -> Application:
    """An agent whose second step brings the object down the first ``resets`` times it runs
    (every time when None), between two steps that do not."""
    app = Application(config)

    @app.agent("agent")
    async def agent(turn: Turn) -> Any:
        await turn.step("prepare", lambda: effects.hit("prepare"))

        def fragile() -> str:
            runs = effects.hit("fragile")
            if resets is None or runs <= resets:
                raise Evicted("the step brought the object down")
            return "done"

        value = await turn.step("fragile", fragile)
        await turn.step("finish", lambda: effects.hit("finish"))
        return {"value": value, "attempt": turn.attempt}

    return app


def _run(app: Application, admit: Callable[[SimulatedObject], str]) -> tuple[Submission, int]:
    """Admit through ``admit``, fire alarms until the object quiesces; the submission as it
    ends, and how many times the object was lost meanwhile."""

    async def go() -> tuple[Submission, int]:
        async with SimulatedObject(app, clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            sub_id = admit(obj)
            await obj.run_alarms()
            return obj.submission(sub_id), obj.evictions

    return asyncio.run(go())


def test_five_resets_during_one_step_of_an_agent_with_max_attempts_3_still_complete() -> None:
    effects = Effects()
    app = _resetting(effects, resets=5, config=RuntimeConfig(max_attempts=3))
    done, evictions = _run(app, lambda obj: obj.admit("t", "agent", None).id)
    assert evictions == 5
    assert (done.outcome, done.result) == (Outcome.COMPLETED, {"value": "done", "attempt": 6})
    assert done.error is None
    # Every Attempt is numbered; the five lost ones are counted apart, not as failures.
    assert (done.attempts, done.losses, done.loss_cause) == (6, 5, "reset")
    # Journaled work was not redone: only the fragile step ran again.
    assert (effects.count("prepare"), effects.count("fragile"), effects.count("finish")) == (
        1, 6, 1)


def test_a_step_that_crashes_the_object_every_time_settles_failed_after_the_loss_bound() -> None:
    effects = Effects()
    config = RuntimeConfig(max_attempts=3)
    bound = config.max_consecutive_losses
    assert bound > config.max_attempts  # the default: a separate, larger bound
    app = _resetting(effects, resets=None, config=config)
    failed, evictions = _run(app, lambda obj: obj.admit("t", "agent", None).id)
    assert evictions == bound == effects.count("fragile")
    assert failed.outcome is Outcome.FAILED
    assert (failed.losses, failed.loss_streak, failed.loss_position) == (bound, bound, 1)
    error = failed.error
    assert (error["type"], error["cause"], error["in_a_row"], error["position"]) == (
        "CrashLoop", "reset", bound, 1)
    assert "max_consecutive_losses" in error["message"]
    assert "after step 'step:prepare' finished" in error["message"]


def test_a_crash_loop_before_any_step_finished_says_so_and_names_the_last_attempt() -> None:
    """The CrashLoop error of an agent lost every time before its first step finishes names
    journal position 0 as "before any step finished" and the last lost Attempt's number."""
    effects = Effects()
    config = RuntimeConfig(max_attempts=3, max_consecutive_losses=4)
    app = Application(config)

    @app.agent("agent")
    async def agent(turn: Turn) -> Any:
        def fragile() -> None:
            effects.hit("fragile")
            raise Evicted("the first step brought the object down")

        return await turn.step("fragile", fragile)

    failed, evictions = _run(app, lambda obj: obj.admit("t", "agent", None).id)
    assert evictions == 4 == effects.count("fragile")
    assert failed.outcome is Outcome.FAILED
    error = failed.error
    assert (error["type"], error["attempt"], error["in_a_row"], error["position"]) == (
        "CrashLoop", 4, 4, 0)
    assert "at journal position 0 (before any step finished)" in error["message"]


def test_an_agent_reset_once_in_each_of_many_steps_is_never_failed_for_it() -> None:
    """Losses in a row are counted at one journal position: a step that finishes between
    two losses starts a new count, however many losses there are in all."""
    effects = Effects()
    config = RuntimeConfig(max_attempts=1, max_consecutive_losses=2)
    app = Application(config)
    steps = 30

    @app.agent("long")
    async def long(turn: Turn) -> Any:
        for n in range(steps):
            def work(n: int = n) -> int:
                if effects.hit(f"step{n}") == 1:
                    raise Evicted(f"lost in step {n}")
                return n

            await turn.step(f"s{n}", work)
        return "done"

    done, evictions = _run(app, lambda obj: obj.admit("t", "long", None).id)
    assert evictions == steps
    assert (done.outcome, done.result) == (Outcome.COMPLETED, "done")
    # The Attempt that completed ended the last streak too.
    assert (done.losses, done.loss_streak) == (steps, 0)


def test_a_real_agent_failure_still_spends_max_attempts_as_before() -> None:
    """Failures are charged as they always were, whatever losses come between them: the
    submission fails on its third failure, not its third Attempt, and with the failure's
    own error."""
    effects = Effects()
    app = Application(RuntimeConfig(max_attempts=3))

    @app.agent("broken")
    async def broken(turn: Turn) -> Any:
        def work() -> None:
            # Lost, failed, lost, failed, lost, failed: three of each, alternating.
            if effects.hit("work") % 2 == 1:
                raise Evicted("the object was reset")
            raise RuntimeError(f"broken in attempt {turn.attempt}")

        return await turn.step("work", work)

    failed, evictions = _run(app, lambda obj: obj.admit("t", "broken", None).id)
    assert evictions == 3
    assert failed.outcome is Outcome.FAILED
    assert failed.error == {"type": "RuntimeError", "message": "broken in attempt 6",
                            "attempt": 6}
    assert (failed.attempts, failed.losses) == (6, 3)


def test_without_resets_failures_spend_max_attempts_exactly() -> None:
    effects = Effects()
    app = Application(RuntimeConfig(max_attempts=3))

    @app.agent("broken")
    async def broken(turn: Turn) -> Any:
        effects.hit("run")
        raise RuntimeError("always")

    failed, evictions = _run(app, lambda obj: obj.admit("t", "broken", None).id)
    assert evictions == 0 and effects.count("run") == 3
    assert (failed.outcome, failed.attempts, failed.losses) == (Outcome.FAILED, 3, 0)
    assert failed.error["type"] == "RuntimeError"


# How the Attempt between two losses ends, other than being lost: given the object, the
# clock and which run of the agent this is, it ends the second run and lets the fourth through.
_Ending = Callable[[Turn, SimulatedObject, ManualClock, int], Awaitable[None]]
_YIELD_AFTER_MS = 10_000


async def _suspends_on_an_approval(turn: Turn, obj: SimulatedObject, clock: ManualClock,
                                   run: int) -> None:
    await turn.approval("ok")


async def _suspends_on_a_timer(turn: Turn, obj: SimulatedObject, clock: ManualClock,
                               run: int) -> None:
    await turn.sleep(60)


async def _yields(turn: Turn, obj: SimulatedObject, clock: ManualClock, run: int) -> None:
    if run == 2:
        clock.advance(_YIELD_AFTER_MS)  # the pass's budget is spent: the next boundary yields
    await turn.step("next", lambda: run)


async def _fails(turn: Turn, obj: SimulatedObject, clock: ManualClock, run: int) -> None:
    if run == 2:
        raise RuntimeError("a real failure, retried after its backoff")


async def _steps_aside(turn: Turn, obj: SimulatedObject, clock: ManualClock, run: int) -> None:
    def charge() -> int:
        if run == 2:
            # Its result is then refused: the step stays in flight and the Attempt parks the
            # submission as an Unknown Outcome, which the operator resolves by a retry.
            obj.fail_statements("INSERT INTO tl_journal")
        return run

    await turn.step("charge", charge, effect="uncertain")


# Each ending, and what the second run raises to end its Attempt that way.
_ENDINGS: dict[str, tuple[_Ending, str]] = {
    "suspends on an approval": (_suspends_on_an_approval, "Suspend"),
    "suspends on a timer": (_suspends_on_a_timer, "Suspend"),
    "yields": (_yields, "YieldNow"),
    "fails": (_fails, "RuntimeError"),
    "steps aside as an Unknown Outcome": (_steps_aside, "StorageError"),
}


@pytest.mark.parametrize("ending", list(_ENDINGS))
def test_losses_with_an_attempt_ending_otherwise_between_them_are_not_in_a_row(
    ending: str,
) -> None:
    """Lost, ended otherwise, lost again, all before any step finished (journal position 0,
    days of deploys apart): the two losses are not in a row, so a bound of 2 is not reached
    and the fourth run completes."""
    effects = Effects()
    clock = ManualClock(START)
    app = Application(RuntimeConfig(max_attempts=3, max_consecutive_losses=2,
                                    yield_after_ms=_YIELD_AFTER_MS))
    held: dict[str, SimulatedObject] = {}
    end, raised = _ENDINGS[ending]
    ended: list[str] = []

    @app.agent("agent")
    async def agent(turn: Turn) -> Any:
        run = effects.hit("run")
        if run in (1, 3):
            raise Evicted(f"deploy {run // 2 + 1}")
        try:
            await end(turn, held["obj"], clock, run)
        except BaseException as exc:
            ended.append(type(exc).__name__)
            raise
        return "done"

    async def go() -> tuple[Submission, int]:
        async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
            held["obj"] = obj
            sub_id = obj.admit("t", "agent", None).id
            await obj.run_alarms()
            # What waits on the outside world is given its answer, days later.
            if any(wait.kind.value == "approval" for wait in obj.waits(sub_id)):
                obj.approve(sub_id, "ok")
            elif obj.submission(sub_id).state is SubmissionState.UNKNOWN:
                obj.resolve(sub_id, "retry")
            await obj.run_alarms()
            return obj.submission(sub_id), obj.evictions

    done, evictions = asyncio.run(go())
    assert done.outcome is Outcome.COMPLETED, done.error
    assert ended == [raised]  # the second run ended its Attempt the way named
    assert evictions == 2 and effects.count("run") == 4
    assert (done.result, done.losses, done.loss_streak, done.loss_position) == ("done", 2, 0, 0)


def test_a_loss_leaving_an_uncertain_step_in_flight_keeps_its_streak_through_an_operator_retry(
) -> None:
    """A loss that parks the submission as an Unknown Outcome is counted in the streak like
    any other; the operator's retry that follows ends no Attempt, so the next loss at the same
    position is the second in a row."""
    effects = Effects()
    app = Application(RuntimeConfig(max_consecutive_losses=3))

    @app.agent("agent")
    async def agent(turn: Turn) -> Any:
        def charge() -> str:
            if effects.hit("charge") <= 2:
                raise Evicted("the object was reset while the charge ran")
            return "charged"

        return await turn.step("charge", charge, effect="uncertain")

    async def go() -> list[Submission]:
        seen = []
        async with SimulatedObject(app, clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            sub_id = obj.admit("t", "agent", None).id
            for _ in range(2):
                await obj.run_alarms()
                seen.append(obj.submission(sub_id))
                obj.resolve(sub_id, "retry")
            await obj.run_alarms()
            seen.append(obj.submission(sub_id))
        return seen

    first, second, done = asyncio.run(go())
    assert [s.state for s in (first, second)] == [SubmissionState.UNKNOWN] * 2
    assert [(s.losses, s.loss_streak, s.loss_position) for s in (first, second)] == [
        (1, 1, 0), (2, 2, 0)]
    assert (done.outcome, done.result, done.losses, done.loss_streak) == (
        Outcome.COMPLETED, "charged", 2, 0)


def test_turn_attempt_is_kept_by_a_loss_and_given_back_by_a_suspension() -> None:
    """``turn.attempt`` counts tries of the work: a lost Attempt keeps its number, as a failed
    one does, and an Attempt that suspends gives its number back to the one that resumes."""
    effects = Effects()
    app = Application(RuntimeConfig())
    seen: list[int] = []

    @app.agent("agent")
    async def agent(turn: Turn) -> Any:
        seen.append(turn.attempt)
        run = effects.hit("run")
        if run in (1, 3):
            raise Evicted(f"deploy {run // 2 + 1}")
        await turn.approval("first")
        await turn.approval("second")
        return "done"

    async def go() -> Submission:
        async with SimulatedObject(app, clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            sub_id = obj.admit("t", "agent", None).id
            for key in ("first", "second"):
                await obj.run_alarms()
                obj.approve(sub_id, key)
            await obj.run_alarms()
            return obj.submission(sub_id)

    done = asyncio.run(go())
    # Lost, suspended, lost, suspended, completed.
    assert seen == [1, 2, 2, 3, 3]
    assert (done.outcome, done.attempts, done.losses) == (Outcome.COMPLETED, 3, 2)
