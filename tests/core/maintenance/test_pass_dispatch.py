"""Dispatch: at most ``native_concurrency`` Threads at once, one head per Thread, round-robin
after the persisted ``last_served_thread``."""

from __future__ import annotations

import asyncio
from typing import Any

from pass_support import Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.scheduling import read_state
from threadline.storage import SqliteStorage
from threadline.threads.model import SubmissionState

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, native_concurrency=2,
                       yield_after_ms=10_000, event_deadline_ms=100_000)


def test_pass_runs_at_most_native_concurrency_threads_and_one_head_per_thread(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        running: set[str] = set()
        peak = {"threads": 0}
        per_thread: dict[str, int] = {}

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                per_thread[turn.thread_id] = per_thread.get(turn.thread_id, 0) + 1
                assert per_thread[turn.thread_id] == 1, "two heads of one Thread at once"
                running.add(turn.submission_id)
                peak["threads"] = max(peak["threads"], len(running))
                for _ in range(1 + 4 * (turn.input["n"] % 3)):  # Attempts of unequal length
                    await asyncio.sleep(0)
                running.discard(turn.submission_id)
                per_thread[turn.thread_id] -= 1
                return "ok"

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        subs = [obj.admit(f"t{n % 5}", {"n": n}) for n in range(20)]
        reports = await obj.run()
        assert all(obj.get(s.id).state is SubmissionState.SETTLED for s in subs)
        assert peak["threads"] == 2
        assert len(reports) == 1 and reports[0].settled == 20
        assert reports[0].dispatched == 20  # each Attempt dispatched once, none twice

    run(body())


def test_pass_serves_threads_round_robin_after_the_last_served_one(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        order: list[str] = []

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                order.append(turn.thread_id)
                await asyncio.sleep(0)  # let the other Attempt of the wave start
                # The first wave of each pass uses up the pass's admission budget.
                clock.advance(CONFIG.yield_after_ms)
                return "ok"

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        clock.advance(1_000)
        for thread in ("a", "b", "c", "d", "e"):
            obj.admit(thread, {})
            obj.admit(thread, {})
        await obj.fire()
        assert order == ["a", "b"]
        assert read_state(raw_storage).last_served_thread == "b"
        await obj.evict()  # the cursor is durable: a new incarnation goes on after it
        await obj.fire()
        assert order[2:] == ["c", "d"]
        await obj.fire()
        assert order[4:] == ["e", "a"]
        await obj.fire()
        assert order[6:] == ["b", "c"]

    run(body())
