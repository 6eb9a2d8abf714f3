"""The old-recovery backlog is rotated with ``last_recovered_thread`` so a deadline or eviction
cannot always restart at the front; an accepted abort keeps FIFO."""

from __future__ import annotations

import asyncio
from typing import Any

from pass_support import Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.scheduling import read_state
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.recovery import RecoverySweepResult

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, yield_after_ms=10_000,
                       event_deadline_ms=20_000)


def _app() -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        async def work() -> str:
            return "done"

        return await turn.step("work", work)

    return app


def test_pass_rotates_old_recovery_after_the_last_recovered_thread(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, _app)
        await obj.start()
        await obj.run()
        for thread in ("a", "b", "c"):
            obj.admit(thread, {})
        # Three Attempts were in flight when an earlier incarnation was lost.
        raw_storage.exec(
            "UPDATE tl_submissions SET state = 'running', attempts = 1, revision = revision + 1,"
            " lease_owner = 'inc_old/lease_1', lease_expires_at = ?", clock.now_ms() + 60_000)
        await obj.evict()
        order: list[str] = []

        def slow_recovery(obj: Obj) -> None:
            recovery = obj.space.runtime.recovery

            def run_one(thread_id: str) -> RecoverySweepResult:
                order.append(thread_id)
                # Each recovery takes the whole event and gets nowhere: the deadline cuts
                # the backlog short, and the Thread still needs recovery next time.
                clock.advance(CONFIG.event_deadline_ms)
                return RecoverySweepResult()

            recovery.run = run_one  # type: ignore[method-assign]

        slow_recovery(obj)
        clock.advance(1_000)
        await obj.fire()
        assert order == ["a"]
        assert read_state(raw_storage).last_recovered_thread == "a"
        await obj.evict()  # the cursor is durable
        slow_recovery(obj)
        await obj.fire()
        assert order == ["a", "b"]
        await obj.fire()
        assert order == ["a", "b", "c"]
        await obj.fire()
        assert order == ["a", "b", "c", "a"]

    run(body())


def test_pass_keeps_fifo_behind_an_accepted_abort(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        release = asyncio.Event()
        events: list[str] = []

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                events.append(f"start {turn.input}")
                if turn.input == "head":
                    await release.wait()

                    async def late() -> str:
                        return "never"

                    await turn.step("late", late)  # a boundary: observes the abort
                events.append(f"end {turn.input}")
                return "ok"

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        head = obj.admit("t", "head")
        follower = obj.admit("t", "follower")
        task = asyncio.ensure_future(obj.fire())
        for _ in range(20):
            await asyncio.sleep(0)
        assert events == ["start head"]
        obj.space.runtime.ledger.request_abort(head.id, "stop")
        assert obj.get(head.id).state is SubmissionState.RUNNING
        assert obj.get(follower.id).state is SubmissionState.QUEUED
        release.set()
        await task
        await obj.run()
        assert obj.get(head.id).outcome is Outcome.ABORTED
        assert obj.get(follower.id).outcome is Outcome.COMPLETED
        assert events == ["start head", "start follower", "end follower"]

    run(body())
