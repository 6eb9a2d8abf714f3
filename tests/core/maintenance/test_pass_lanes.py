"""The lane runner: each due non-native lane gets one bounded wave; a failure is charged and
backed off; a due lane without a handler fails loudly and never spins; recovery events are
delivered through their lane while native work goes on."""

from __future__ import annotations

import asyncio
from typing import Any

from pass_support import CONFIG, Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.maintenance import PassPhase
from threadline.scheduling import PARKED_RETRY_MS, LaneState
from threadline.storage import SqliteStorage
from threadline.threads.model import SubmissionState

LANE = "probe.lane"


def test_pass_completes_a_lane_with_the_deadline_its_handler_returns(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        seen: list[tuple[int, int]] = []

        async def handler(now: int, deadline: int) -> int | None:
            seen.append((now, deadline))
            return now + 60_000 if len(seen) == 1 else None

        obj.space.lanes.register(LANE, handler, dispatch_timeout_ms=5_000)
        obj.space.scheduler.gate.schedule(LANE, clock.now_ms())
        first = await obj.fire()
        assert first.phase is PassPhase.CAUGHT_UP
        now = seen[0][0]
        assert seen[0][1] == now + 5_000
        lane = obj.space.scheduler.due_queue.get(LANE)
        assert lane is not None and lane.due_at == now + 60_000
        assert raw_storage.known_alarm() == now + 60_000
        await obj.run()
        lane = obj.space.scheduler.due_queue.get(LANE)
        assert lane is not None and lane.state is LaneState.IDLE and lane.stalls == 0
        assert raw_storage.known_alarm() is None

    run(body())


def test_pass_backs_off_a_failing_lane_without_blocking_native_work(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()

        async def failing(now: int, deadline: int) -> int | None:
            raise RuntimeError("host is down")

        obj.space.lanes.register(LANE, failing, dispatch_timeout_ms=5_000)
        obj.space.scheduler.gate.schedule(LANE, clock.now_ms())
        sub = obj.admit("t", {})
        report = await obj.fire()
        assert report.phase is PassPhase.ACTIONABLE
        assert obj.get(sub.id).state is SubmissionState.SETTLED
        lane = obj.space.scheduler.due_queue.get(LANE)
        assert lane is not None and lane.stalls == 1 and lane.due_at is not None
        delay = lane.due_at - clock.now_ms()
        ceiling = CONFIG.alarm_backoff_base_ms * 2  # base * 2^stalls
        assert ceiling // 2 <= delay <= ceiling
        assert any("probe.lane" in line and "RuntimeError" in line for line in obj.logs)
        assert not any("host is down" in line for line in obj.logs)

    run(body())


def test_pass_times_out_a_lane_wave_at_its_dispatch_timeout(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()

        async def hangs(now: int, deadline: int) -> int | None:
            await asyncio.Event().wait()
            return None

        obj.space.lanes.register(LANE, hangs, dispatch_timeout_ms=5_000)
        obj.space.scheduler.gate.schedule(LANE, clock.now_ms())
        task = asyncio.ensure_future(obj.fire())
        for _ in range(10):
            await asyncio.sleep(0)
        assert not task.done()
        clock.advance(5_000)
        await asyncio.wait_for(task, timeout=5)
        lane = obj.space.scheduler.due_queue.get(LANE)
        assert lane is not None and lane.stalls == 1
        assert any("dispatch timeout" in line for line in obj.logs)

    run(body())


def test_pass_fails_a_due_lane_without_handler_loudly_and_never_spins(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    config = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=8_000,
                           park_after_stalls=4)

    async def body() -> None:
        obj = Obj(raw_storage, clock, lambda: echo_app(config))
        await obj.start()
        await obj.run()
        obj.space.scheduler.gate.schedule("nobody.serves", clock.now_ms())
        start = clock.now_ms()
        passes = 0
        while clock.now_ms() < start + 2 * PARKED_RETRY_MS:
            slot = raw_storage.known_alarm()
            assert slot is not None
            clock.set(max(slot, clock.now_ms()))
            await obj.fire()
            passes += 1
        # 3 backed-off failures, then parked and retried hourly: a handful, not thousands.
        assert passes <= 3 + 3
        lane = obj.space.scheduler.due_queue.get("nobody.serves")
        assert lane is not None and lane.state is LaneState.PARKED
        unhandled = [line for line in obj.logs if "no registered handler" in line]
        assert len(unhandled) == passes
        parked = [line for line in obj.logs if "is parked" in line]
        assert len(parked) == 1  # reported once
        await obj.evict()  # a restart does not report the same parking again
        assert len([line for line in obj.logs if "is parked" in line]) == 1

    run(body())


def test_pass_delivers_recovery_events_through_their_lane(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        delivered: list[int] = []

        def make() -> Any:
            app = echo_app()

            @app.on_recovery_event
            async def hook(event: Any) -> None:
                delivered.append(event.seq)

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        faults = obj.space.faults
        faults.record("x", failure="f", error_type="E", recipients=["s1"])
        faults.clear("x")
        await obj.run()
        assert delivered == [1, 2]
        assert raw_storage.known_alarm() is None

    run(body())


def test_lane_runner_refuses_a_second_handler_and_the_native_lane() -> None:
    import random

    import pytest

    from threadline.clock import ManualClock as Clock
    from threadline.errors import SchedulingError
    from threadline.maintenance import LaneRunner
    from threadline.scheduling import NATIVE, build_scheduler
    from threadline.storage import SqliteStorage as Sqlite
    from threadline.storage import migrate

    storage = Sqlite(":memory:")
    migrate(storage)
    sched = build_scheduler(storage, Clock(), CONFIG, random.Random(1))
    lanes = LaneRunner(storage, sched.gate, sched.due_queue, sched.clock, CONFIG, random.Random(1))

    async def idle(now: int, deadline: int) -> int | None:
        return None

    lanes.register(LANE, idle, dispatch_timeout_ms=1)
    with pytest.raises(SchedulingError):
        lanes.register(LANE, idle, dispatch_timeout_ms=1)
    with pytest.raises(SchedulingError):
        lanes.register(NATIVE, idle, dispatch_timeout_ms=1)
    with pytest.raises(SchedulingError):
        lanes.register("other.lane", idle, dispatch_timeout_ms=300_001)
    storage.close()
