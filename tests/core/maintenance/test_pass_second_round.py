"""The second round of an actionable pass: a host lane enrolled (or given progress) during the
pass's native work gets its wave in the same pass, not at the next alarm."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pass_support import CONFIG, Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.storage import SqliteStorage

LANE = "probe.lane"
OTHER = "other.lane"
HOUR_MS = 3_600_000


@pytest.mark.parametrize("cursor", [1, None], ids=["progress", "enrollment"])
def test_host_lane_enrolled_during_native_work_gets_a_wave_in_the_same_pass(
    raw_storage: SqliteStorage, clock: ManualClock, cursor: int | None
) -> None:
    async def body() -> None:
        holder: dict[str, Obj] = {}
        waves: list[int] = []

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                # A host fact (with a newer cursor: progress) on its lane, made mid-pass.
                gate = holder["obj"].space.scheduler.gate
                gate.schedule(LANE, holder["obj"].clock.now_ms(), progress_cursor=cursor)
                return {"echo": turn.input}

            return app

        obj = Obj(raw_storage, clock, make)
        holder["obj"] = obj
        await obj.start()
        await obj.run()

        async def handler(now: int, deadline: int) -> int | None:
            waves.append(now)
            return None

        async def idle(now: int, deadline: int) -> int | None:
            return None

        obj.space.lanes.register(LANE, handler, dispatch_timeout_ms=5_000)
        obj.space.lanes.register(OTHER, idle, dispatch_timeout_ms=5_000)
        # An enrollment of another lane before the pass: the count the pass compares is not 0.
        obj.space.scheduler.gate.schedule(OTHER, clock.now_ms() + HOUR_MS)
        obj.admit("t", {"n": 1})
        clock.set(max(raw_storage.known_alarm() or 0, clock.now_ms()))
        report = await obj.fire()
        assert report.phase is not PassPhase.CAUGHT_UP
        # The lane was not due at the begin: only the second round can have served it.
        assert waves == [clock.now_ms()]
        lane = obj.space.scheduler.due_queue.get(LANE)
        assert lane is not None and lane.due_at is None

    run(body())


def test_a_lane_held_by_a_mutation_at_the_begin_gets_its_wave_once_released(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        release = asyncio.Event()
        waves: list[int] = []

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                # The host's mutation ends while the pass does its native work.
                release.set()
                for _ in range(5):
                    await asyncio.sleep(0)
                return {"echo": turn.input}

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()

        async def handler(now: int, deadline: int) -> int | None:
            waves.append(now)
            return None

        obj.space.lanes.register(LANE, handler, dispatch_timeout_ms=5_000)
        gate = obj.space.scheduler.gate

        async def host() -> None:
            async with gate.mutation(lanes=[LANE], invalidates_recovery=False):
                await release.wait()

        mutation = asyncio.ensure_future(host())
        for _ in range(5):
            await asyncio.sleep(0)
        assert LANE in gate.active_lanes()
        obj.admit("t", {"n": 1})
        clock.set(max(raw_storage.known_alarm() or 0, clock.now_ms()))
        report = await obj.fire()
        await mutation
        assert report.phase is not PassPhase.CAUGHT_UP
        # Due at the begin but held then: the second round serves it in the same pass.
        assert waves == [clock.now_ms()]

    run(body())
