"""A schedule starts when a space's object starts with it registered: its row and its lane's
deadline are written then. One a deploy removed is dropped at start-up with
a log line (row and lane), one whose declaration changed starts afresh from its new next fire,
and an unchanged one keeps its stored next fire."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from schedules_support import HOUR, MINUTE, START, app_with_echo, clock, lane, row

from threadline import Application, LaneContext, ScheduleContext
from threadline.testing import SimulatedObject


async def noop(ctx: ScheduleContext) -> None:
    return None


def first_deploy() -> Application:
    app = app_with_echo()
    app.every(timedelta(minutes=5), id="kept")(noop)
    app.every(timedelta(minutes=10), id="changed")(noop)
    app.cron("0 9 * * *", id="removed")(noop)
    app.every(timedelta(hours=1), id="becomes-lane")(noop)
    return app


def second_deploy() -> Application:
    app = app_with_echo()
    app.every(timedelta(minutes=5), id="kept")(noop)
    app.cron("*/15 * * * *", tz="Europe/Paris", id="changed")(noop)
    app.every(timedelta(days=1), id="added")(noop)

    @app.lane("becomes-lane")
    async def becomes_lane(ctx: LaneContext) -> None:
        return None

    return app


async def _scenario() -> None:
    obj = SimulatedObject(first_deploy(), clock=clock(), check_alarm_invariant=True)
    async with obj:
        assert [item.id for item in obj.space.schedules.rows()] == [
            "becomes-lane", "changed", "kept", "removed"]
        kept = row(obj, "kept")
        becomes = lane(obj, "becomes-lane")
        assert kept is not None and becomes is not None
        obj.clock.advance(7 * MINUTE)
        await obj.redeploy(second_deploy())
        assert [item.id for item in obj.space.schedules.rows()] == ["added", "changed", "kept"]
        assert row(obj, "kept") == kept
        changed = row(obj, "changed")
        assert changed is not None and changed.spec == "cron */15 * * * * Europe/Paris"
        assert changed.next_fire == (obj.clock.now_ms() // (15 * MINUTE) + 1) * (15 * MINUTE)
        changed_lane = lane(obj, "changed")
        assert changed_lane is not None and changed_lane.due_at == changed.next_fire
        added = row(obj, "added")
        assert added is not None and added.next_fire == (START // (24 * HOUR) + 1) * 24 * HOUR
        assert lane(obj, "removed") is None
        # The host lane that took over an id keeps its row.
        assert lane(obj, "becomes-lane") == becomes


def test_schedules_start_with_their_object_removed_ones_are_dropped_changed_ones_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="threadline.maintenance"):
        asyncio.run(_scenario())
    lines = [r.getMessage() for r in caplog.records]
    dropped = [line for line in lines if "not declared in this deployment" in line]
    assert sorted(dropped) == [
        "threadline: schedule 'becomes-lane' (every 3600000ms) is not declared in this "
        "deployment; dropped",
        "threadline: schedule 'removed' (cron 0 9 * * * UTC) is not declared in this "
        "deployment; dropped",
    ]
    assert any("'changed' changed from every 600000ms to cron */15 * * * * Europe/Paris"
               in line for line in lines)
    assert not any("host lane" in line for line in lines)
