"""SystemExit and KeyboardInterrupt raised by an agent (or a library it calls), a step, a
subscriber or a lane handler are that code's failure: the Attempt fails like any exception,
counted against max_attempts with the error naming it, and no other Thread notices. Nothing in
the platform stops Python code that way, so letting one out would take the alarm down."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadline import Application, LaneContext, Record, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, SubmissionState

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=60_000,
                       max_attempts=3)


def _app(steps: list[str], raised: type[BaseException]) -> Application:
    app = Application(CONFIG)

    @app.agent("quits")
    async def quits(turn: Turn) -> None:
        raise raised("the agent quit")

    @app.agent("quits_in_a_step")
    async def quits_in_a_step(turn: Turn) -> None:
        def exits() -> None:
            raise raised("a library quit")

        await turn.step("call", exits, effect="uncertain")

    @app.agent("innocent")
    async def innocent(turn: Turn) -> Any:
        async def work() -> str:
            steps.append(turn.submission_id)
            await asyncio.sleep(0)
            return "done"

        return await turn.step("work", work)

    return app


async def _quits(raised: type[BaseException]) -> None:
    steps: list[str] = []
    async with SimulatedObject(_app(steps, raised), clock=ManualClock(1_000_000),
                               check_alarm_invariant=True) as obj:
        first = obj.admit("x", "quits", {}).id
        second = obj.admit("y", "quits", {}).id
        ok = obj.admit("z", "innocent", {}).id
        await obj.run_alarms()
        for bad in (first, second):
            failed = obj.submission(bad)
            assert failed.state is SubmissionState.SETTLED and failed.outcome is Outcome.FAILED
            assert failed.attempts == CONFIG.max_attempts
            assert isinstance(failed.error, dict) and failed.error["type"] == raised.__name__
        innocent = obj.submission(ok)
        assert innocent.state is SubmissionState.SETTLED
        assert innocent.outcome is Outcome.COMPLETED
        assert steps == [ok]  # its step ran once: no Attempt of it was cancelled


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
def test_an_agent_raising_it_fails_its_attempt_and_no_other_thread_notices(
    raised: type[BaseException],
) -> None:
    asyncio.run(_quits(raised))


async def _quits_in_a_step() -> None:
    steps: list[str] = []
    async with SimulatedObject(_app(steps, SystemExit), clock=ManualClock(1_000_000),
                               check_alarm_invariant=True) as obj:
        bad = obj.admit("x", "quits_in_a_step", {}).id
        ok = obj.admit("z", "innocent", {}).id
        await obj.run_alarms()
        # The uncertain step returned control by raising: it failed, it is not Unknown.
        failed = obj.submission(bad)
        assert failed.state is SubmissionState.SETTLED and failed.outcome is Outcome.FAILED
        assert isinstance(failed.error, dict) and failed.error["type"] == "SystemExit"
        assert obj.submission(ok).state is SubmissionState.SETTLED and steps == [ok]


def test_a_step_raising_it_fails_like_any_exception() -> None:
    asyncio.run(_quits_in_a_step())


async def _callbacks() -> None:
    app = Application(CONFIG)
    delivered: list[int] = []
    quit_once = [True]

    @app.agent("innocent")
    async def innocent(turn: Turn) -> str:
        return "done"

    @app.subscriber("audit")
    async def audit(batch: list[Record]) -> None:
        if quit_once[0]:
            quit_once[0] = False
            raise SystemExit("the subscriber quit")
        delivered.extend(record.seq for record in batch)

    @app.lane("poll")
    async def poll(ctx: LaneContext) -> None:
        raise KeyboardInterrupt

    async with SimulatedObject(app, clock=ManualClock(1_000_000),
                               check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        obj.wake_lane("poll")
        ok = obj.admit("z", "innocent", {}).id
        await obj.run_alarms(until=obj.clock.now_ms() + 600_000)
        assert obj.submission(ok).state is SubmissionState.SETTLED
        # The subscriber backed off and delivered after it, whole.
        assert delivered == [1]
        lane = obj.space.scheduler.due_queue.get("poll")
        assert lane is not None and lane.stalls > 0


def test_a_subscriber_or_lane_handler_raising_it_fails_and_backs_off() -> None:
    asyncio.run(_callbacks())
