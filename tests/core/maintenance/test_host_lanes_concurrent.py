"""A concurrent host lane: woken, it gets one wave in the next pass, beside native work; the
deadline its handler returns re-arms the alarm (and is when it runs next); None leaves it idle
with no alarm; a naive deadline fails the wave with a clear error, charged and backed off like
any failure; waves that return deadlines without reporting progress count toward parking, and
waves that report progress never do."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta, timezone

import pytest
from host_lanes_support import CONFIG, START, at, clock, lane

from threadline import Application, LaneContext
from threadline.maintenance import PassPhase
from threadline.scheduling import LaneState
from threadline.testing import SimulatedObject

HOUR = 3_600_000


def _app(seen: list[LaneContext], returns: list[datetime | None]) -> Application:
    app = Application(CONFIG)

    @app.lane("sync", dispatch_timeout=timedelta(seconds=20))
    async def sync(ctx: LaneContext) -> datetime | None:
        seen.append(ctx)
        ctx.progress()
        return returns.pop(0)

    return app


async def _woken_lane_runs_and_rearms() -> None:
    seen: list[LaneContext] = []
    returns: list[datetime | None] = [at(START + HOUR), None]
    async with SimulatedObject(_app(seen, returns), clock=clock(),
                               check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        assert seen == []  # no initial wave: a lane runs only when it is due
        woken = obj.clock.now_ms()
        obj.wake_lane("sync")
        assert obj.alarm_at == woken + CONFIG.min_alarm_delay_ms
        await obj.run_alarms(until=woken + 1_000)
        assert len(seen) == 1
        ctx = seen[0]
        assert ctx.lane_id == "sync" and ctx.now == at(woken + CONFIG.min_alarm_delay_ms)
        assert ctx.now.tzinfo is not None and ctx.deadline - ctx.now == timedelta(seconds=20)
        # Its returned deadline is when it is due next, and the alarm is armed for it.
        row = lane(obj, "sync")
        assert row is not None and row.due_at == START + HOUR and row.stalls == 0
        assert obj.alarm_at == START + HOUR
        await obj.run_alarms()
        assert len(seen) == 2 and seen[1].now == at(START + HOUR)
        assert obj.alarm_at is None


def test_a_woken_concurrent_lane_runs_in_the_pass_and_its_returned_deadline_rearms_the_alarm(
) -> None:
    asyncio.run(_woken_lane_runs_and_rearms())


async def _idle_lane() -> None:
    seen: list[LaneContext] = []
    async with SimulatedObject(_app(seen, [None]), clock=clock(),
                               check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        obj.wake_lane("sync")
        reports = await obj.run_alarms()
        assert len(seen) == 1 and reports[-1].phase is PassPhase.CAUGHT_UP
        row = lane(obj, "sync")
        assert row is not None and row.state is LaneState.IDLE and row.due_at is None
        assert obj.alarm_at is None


def test_an_idle_lane_returning_none_leaves_no_alarm() -> None:
    asyncio.run(_idle_lane())


async def _runs_beside_native_work() -> None:
    order: list[str] = []
    app = Application(CONFIG)
    release = asyncio.Event()

    @app.agent("slow")
    async def slow(turn: object) -> str:
        order.append("attempt started")
        await release.wait()
        order.append("attempt ended")
        return "done"

    @app.lane("sync")
    async def sync(ctx: LaneContext) -> None:
        order.append("lane wave")
        release.set()

    async with SimulatedObject(app, clock=clock()) as obj:
        await obj.run_alarms()
        sub = obj.admit("t", "slow", None)
        obj.wake_lane("sync")
        await obj.run_alarms()
        # The wave ran while the Attempt was running: it is what released it, in the first
        # pass (an Attempt left waiting would have timed out and been retried).
        assert order.index("lane wave") < order.index("attempt ended")
        assert order.count("attempt started") == 1
        done = obj.submission(sub.id)
        assert done.result == "done" and done.attempts == 1


def test_a_concurrent_lane_runs_beside_native_work() -> None:
    asyncio.run(_runs_beside_native_work())


async def _naive_deadline(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[int] = []
    app = Application(CONFIG)

    @app.lane("sync")
    async def sync(ctx: LaneContext) -> datetime | None:
        runs.append(1)
        return datetime(2030, 1, 1)  # no time zone

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        obj.wake_lane("sync")
        wave = obj.alarm_at
        assert wave is not None
        await obj.run_alarms(until=wave)
        assert runs == [1]
        row = lane(obj, "sync")
        assert row is not None and row.stalls == 1 and row.due_at is not None
        ceiling = CONFIG.alarm_backoff_base_ms * 2
        assert ceiling // 2 <= row.due_at - wave <= ceiling  # backed off
        failures = [r.getMessage() for r in caplog.records if "'sync' failed" in r.getMessage()]
        assert len(failures) == 1 and "naive datetime" in failures[0]


def test_a_naive_returned_deadline_fails_the_wave_with_a_clear_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.maintenance")
    asyncio.run(_naive_deadline(caplog))


async def _aware_offset() -> None:
    app = Application(CONFIG)
    paris = datetime(2024, 1, 1, 10, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=1)))

    @app.lane("sync")
    def sync(ctx: LaneContext) -> datetime:  # a plain function is a handler too
        return paris

    async with SimulatedObject(app, clock=clock()) as obj:
        await obj.run_alarms()
        obj.wake_lane("sync")
        await obj.run_alarms(until=obj.clock.now_ms() + 1_000)
        row = lane(obj, "sync")
        assert row is not None and row.due_at == int(paris.timestamp() * 1000)


def test_a_deadline_in_any_time_zone_is_the_same_instant() -> None:
    asyncio.run(_aware_offset())


async def _parks_without_progress(report_progress: bool) -> tuple[LaneState, int, int]:
    config = CONFIG.model_copy(update={"park_after_stalls": 3})
    app = Application(config)
    runs: list[int] = []

    @app.lane("poll")
    async def poll(ctx: LaneContext) -> datetime:
        runs.append(1)
        if report_progress:
            ctx.progress()
        return ctx.now + timedelta(minutes=1)

    async with SimulatedObject(app, clock=clock()) as obj:
        await obj.run_alarms()
        obj.wake_lane("poll")
        await obj.run_alarms(until=obj.clock.now_ms() + 10 * 60_000)
        row = lane(obj, "poll")
        assert row is not None
        return row.state, row.stalls, len(runs)


def test_waves_returning_deadlines_without_progress_park_the_lane() -> None:
    state, stalls, runs = asyncio.run(_parks_without_progress(False))
    # Three waves without progress, then parked: retried hourly, not every minute.
    assert (state, stalls, runs) == (LaneState.PARKED, 3, 3)


def test_waves_that_report_progress_never_park_the_lane() -> None:
    state, stalls, runs = asyncio.run(_parks_without_progress(True))
    assert state is LaneState.DUE and stalls == 0 and runs >= 10
