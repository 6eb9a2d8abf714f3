"""An Attempt the pass stops at its event deadline is lost, not failed: it is recorded as
interrupted and run again without spending ``max_attempts``."""

from __future__ import annotations

import asyncio
from typing import Any

from pass_support import Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, yield_after_ms=10_000,
                       event_deadline_ms=20_000, native_concurrency=1, max_attempts=1)


def test_pass_an_attempt_stopped_at_the_event_deadline_is_interrupted_not_failed(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        hang = {"on": True}

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                async def call() -> str:
                    if hang["on"]:
                        await asyncio.Event().wait()  # never answers in the first pass
                    return "answer"

                return await turn.step("call", call)

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        sub = obj.admit("a", {})
        clock.advance(1_000)
        started = clock.now_ms()
        task = asyncio.ensure_future(obj.fire())
        for _ in range(20):
            await asyncio.sleep(0)
        clock.set(started + CONFIG.event_deadline_ms)
        await asyncio.wait_for(task, timeout=5)
        assert obj.get(sub.id).state is SubmissionState.RUNNING
        # Recovered by this incarnation, which stopped it: not a reset, and not a failure.
        obj.space.runtime.run_recovery("a")
        lost = obj.get(sub.id)
        assert lost.state is SubmissionState.READY
        assert (lost.error["type"], lost.error["cause"]) == ("AttemptLost", "interrupted")
        hang["on"] = False
        await obj.run()
        done = obj.get(sub.id)
        assert (done.outcome, done.result) == (Outcome.COMPLETED, "answer")
        assert (done.attempts, done.losses, done.loss_cause) == (2, 1, "interrupted")

    run(body())
