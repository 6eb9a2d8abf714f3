"""A host lane whose handler a deploy removed is dropped when the object starts, with one log
line, instead of being claimed, backed off and parked forever; declared lanes and the
framework's own lanes are kept; re-declaring the lane later starts it afresh."""

from __future__ import annotations

import asyncio
import logging

import pytest
from host_lanes_support import CONFIG, at, clock, lane

from threadline import Application, LaneContext
from threadline.scheduling import MESSAGES, RECOVERY_EVENTS
from threadline.testing import SimulatedObject

HOUR = 3_600_000


def _app(*lanes: str, runs: list[str] | None = None) -> Application:
    app = Application(CONFIG)
    for name in lanes:

        @app.lane(name)
        async def run(ctx: LaneContext, name: str = name) -> None:
            if runs is not None:
                runs.append(name)

    return app


async def _removed(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[str] = []
    async with SimulatedObject(_app("sync", "digest", "idle", runs=runs), clock=clock(),
                               check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        due = obj.clock.now_ms() + HOUR
        obj.wake_lane("sync", at(due))
        obj.wake_lane("digest", at(due))
        obj.wake_lane("idle")
        await obj.run_alarms(until=due - 1)
        assert runs == ["idle"]
        # A framework lane without a handler (message delivery, say) is the framework's.
        obj.space.scheduler.gate.schedule(MESSAGES, due)
        caplog.clear()
        await obj.redeploy(_app("digest", runs=runs))
        dropped = [r.getMessage() for r in caplog.records if "has no handler" in r.getMessage()]
        assert dropped == [
            "threadline: host lane 'idle' has no handler in this deployment; dropped (idle)",
            f"threadline: host lane 'sync' has no handler in this deployment; dropped "
            f"(due at {due})",
        ]
        assert lane(obj, "sync") is None and lane(obj, "idle") is None
        kept = lane(obj, "digest")
        assert kept is not None and kept.due_at == due
        framework = lane(obj, MESSAGES)
        assert framework is not None and framework.due_at == due
        await obj.run_alarms(until=due + 1_000)
        assert runs == ["idle", "digest"]
        await obj.evict()  # once dropped, a later start has nothing to say
        assert [r for r in caplog.records if "has no handler" in r.getMessage()
                and r.getMessage() not in dropped] == []
        # Declared again by a later deploy, the lane starts afresh: woken, it runs.
        await obj.redeploy(_app("digest", "sync", runs=runs))
        obj.wake_lane("sync")
        await obj.run_alarms(until=obj.clock.now_ms() + 1_000)
        assert runs[-1] == "sync"
        row = lane(obj, "sync")
        assert row is not None and row.revision == 1


def test_a_lane_removed_by_a_deploy_is_dropped_at_start_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.maintenance")
    asyncio.run(_removed(caplog))


async def _check_cost() -> int:
    async with SimulatedObject(_app("digest"), clock=clock()) as obj:
        await obj.run_alarms()
        gate = obj.space.scheduler.gate
        for framework in (MESSAGES, RECOVERY_EVENTS):
            gate.schedule(framework, obj.clock.now_ms() + HOUR)
        obj.wake_lane("digest", at(obj.clock.now_ms() + HOUR))
        assert len(obj.space.scheduler.due_queue.lanes()) == 4  # with the native lane
        before = obj.storage.meter.reading()
        assert obj.space.lanes.drop_removed() == []
        return (obj.storage.meter.reading() - before).rows_read


def test_the_start_up_check_reads_the_host_lanes_rows_only() -> None:
    assert asyncio.run(_check_cost()) == 1
