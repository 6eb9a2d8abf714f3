"""An agent whose own code raises ``CancelledError`` (a sub-task it cancelled, say) fails only
its own Attempt: the pass is not cancelled, and the other Threads' Attempts running with it
go on undisturbed (an uncertain step of theirs is not turned into an Unknown Outcome)."""

from __future__ import annotations

import asyncio

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.testing import Effects, SimulatedObject
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn


def _app(effects: Effects, started: asyncio.Event, clock: ManualClock) -> Application:
    app = Application(RuntimeConfig(native_concurrency=4, max_attempts=2))

    @app.agent("cancels-itself")
    async def cancels_itself(turn: Turn) -> None:
        await started.wait()  # the other Thread's uncertain step is in flight
        effects.hit("cancels-itself")
        inner = asyncio.ensure_future(asyncio.sleep(3600))
        inner.cancel()
        await inner  # its own sub-task's cancellation escapes the agent

    @app.agent("charges")
    async def charges(turn: Turn) -> dict[str, int]:
        async def charge() -> int:
            started.set()
            effects.hit("charge")
            await clock.sleep_until(clock.now_ms() + 1_000)
            return 7

        value = await turn.step("charge", charge, effect="uncertain")
        return {"charged": int(value)}  # type: ignore[arg-type]

    return app


async def _run() -> None:
    effects = Effects()
    started = asyncio.Event()
    clock = ManualClock()
    async with SimulatedObject(_app(effects, started, clock), clock=clock) as obj:
        bad = obj.admit("t-bad", "cancels-itself", {})
        good = obj.admit("t-good", "charges", {})
        await obj.run_alarms(max_passes=50)

        charged = obj.submission(good.id)
        assert charged.state is SubmissionState.SETTLED
        assert charged.outcome is Outcome.COMPLETED
        assert charged.result == {"charged": 7}
        assert effects.count("charge") == 1

        failed = obj.submission(bad.id)
        assert failed.state is SubmissionState.SETTLED
        assert failed.outcome is Outcome.FAILED
        assert "CancelledError" in str(failed.error)
        assert effects.count("cancels-itself") == 2  # max_attempts, then failed with its cause


def test_an_agents_own_cancelled_error_fails_only_its_attempt() -> None:
    asyncio.run(_run())
