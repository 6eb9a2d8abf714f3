"""A host lane's allowance is enforced on the object's clock: a handler that outruns it is
cancelled (one that ignores the cancellation is abandoned after ``cancel_grace_ms``), the wave
counts as failed, the lane keeps its due revision and backs off on its own, and it is not run
again in the same event; other lanes and native work that still have allowance carry on."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from host_lanes_support import CONFIG, clock, lane

from threadline import Application, LaneContext, Turn
from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

ALLOWANCE_MS = 1_000
NATIVE_MS = 10_000
GRACE_MS = 2_000
DAY_MS = 86_400_000


def _app(time: ManualClock, runs: dict[str, int]) -> Application:
    app = Application(CONFIG.model_copy(update={"cancel_grace_ms": GRACE_MS}))
    allowance = timedelta(milliseconds=ALLOWANCE_MS)

    @app.lane("slow", dispatch_timeout=allowance)
    async def slow(ctx: LaneContext) -> None:
        runs["slow"] += 1
        await asyncio.Event().wait()

    @app.lane("stubborn", dispatch_timeout=allowance)
    async def stubborn(ctx: LaneContext) -> None:
        runs["stubborn"] += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await time.sleep_until(time.now_ms() + DAY_MS)  # swallows its cancellation

    @app.lane("quick")
    async def quick(ctx: LaneContext) -> None:
        runs["quick"] += 1

    @app.lane("late")
    async def late(ctx: LaneContext) -> None:
        runs["late"] += 1

    @app.agent("long")
    async def long(turn: Turn) -> Any:
        # Native work that outlasts the lanes' allowance and their backoff.
        await turn.step("work", lambda: time.sleep_until(time.now_ms() + NATIVE_MS))
        await turn.wake_lane("late")  # an enrollment mid-pass: a second round of waves
        return "done"

    return app


async def _overrun(caplog: pytest.LogCaptureFixture) -> None:
    time = clock()
    runs = {"slow": 0, "stubborn": 0, "quick": 0, "late": 0}
    async with SimulatedObject(_app(time, runs), clock=time, check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        sub = obj.admit("t", "long", None)
        for name in ("slow", "stubborn", "quick"):
            obj.wake_lane(name)
        revisions = {name: lane(obj, name).revision  # type: ignore[union-attr]
                     for name in ("slow", "stubborn")}
        fired = obj.alarm_at
        assert fired is not None
        reports = await obj.run_alarms(until=fired)
        assert len(reports) == 1
        report = reports[0]
        assert report.phase is PassPhase.ACTIONABLE
        # Native work and the healthy lane were not cut short by the failing ones.
        assert obj.submission(sub.id).outcome is Outcome.COMPLETED
        assert report.duration_ms >= NATIVE_MS
        # Each failing lane ran once in the event, though due again long before it ended.
        assert runs == {"slow": 1, "stubborn": 1, "quick": 1, "late": 1}
        assert obj.space.lanes.abandoned == 1
        for name in ("slow", "stubborn"):
            row = lane(obj, name)
            assert row is not None and row.stalls == 1
            assert row.revision == revisions[name]  # its due revision is kept
            assert row.due_at is not None and row.due_at < fired + NATIVE_MS
        messages = [record.getMessage() for record in caplog.records]
        assert any("'slow' ran past its dispatch timeout" in m for m in messages)
        assert any("'stubborn'" in m and "abandoned" in m for m in messages)
        # Next events: each failing lane backs off on its own, native work is done.
        await obj.run_alarms(until=obj.clock.now_ms() + 60_000)
        assert runs["slow"] > 1 and runs["stubborn"] > 1
        assert runs["quick"] == 1 and runs["late"] == 1
        slow, stubborn = lane(obj, "slow"), lane(obj, "stubborn")
        assert slow is not None and stubborn is not None
        assert slow.stalls == runs["slow"] and stubborn.stalls == runs["stubborn"]
        # Backed off: a handful of tries a minute, not one per event.
        assert runs["slow"] <= 8


def test_an_overrunning_handler_is_cancelled_counts_as_failed_and_backs_off_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.maintenance")
    asyncio.run(_overrun(caplog))
