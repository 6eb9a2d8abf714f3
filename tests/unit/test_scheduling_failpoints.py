from __future__ import annotations

import asyncio

import pytest

from threadline.errors import Evicted, SchedulingError
from threadline.scheduling import (
    FAILPOINT_LOCATIONS,
    MAINTENANCE_LOCATIONS,
    PUBLICATION_LOCATIONS,
    RETENTION_LOCATIONS,
    RUNTIME_LOCATIONS,
    SCHEDULE_LOCATIONS,
    Failpoints,
)


def test_locations_cover_the_maintenance_runtime_and_schedule_boundaries() -> None:
    assert len(MAINTENANCE_LOCATIONS) == 23
    assert all(name.startswith("maintenance:") for name in MAINTENANCE_LOCATIONS)
    assert {"attempt:claimed", "step:started", "settle:after"} <= set(RUNTIME_LOCATIONS)
    assert all(name.startswith("schedule:") for name in SCHEDULE_LOCATIONS)
    assert all(name.startswith("publication:") for name in PUBLICATION_LOCATIONS)
    assert all(name.startswith("retention:") for name in RETENTION_LOCATIONS)
    assert frozenset(MAINTENANCE_LOCATIONS + RUNTIME_LOCATIONS + SCHEDULE_LOCATIONS
                     + PUBLICATION_LOCATIONS + RETENTION_LOCATIONS) == FAILPOINT_LOCATIONS


def test_inert_by_default_and_counts() -> None:
    points = Failpoints()
    points.hit("step:started")
    asyncio.run(points.reached("step:started"))
    assert points.hits("step:started") == 2
    assert points.hits("step:finished") == 0


def test_unknown_locations_are_refused() -> None:
    with pytest.raises(SchedulingError):
        Failpoints().install("maintenance:nope", lambda _: None)
    custom = Failpoints(locations=["x:y"])
    custom.install("x:y", lambda _: None)


def test_evict_at_raises_after_n_passes() -> None:
    points = Failpoints()
    points.evict_at("settle:before", after=1)
    points.hit("settle:before")
    with pytest.raises(Evicted) as caught:
        points.hit("settle:before")
    assert caught.value.location == "settle:before"
    points.clear("settle:before")
    points.hit("settle:before")
    assert points.hits("settle:before") == 3


def test_async_handler_refused_at_a_sync_site() -> None:
    points = Failpoints()
    gate = points.block_at("step:started")
    with pytest.raises(SchedulingError):
        points.hit("step:started")
    gate.release()


def test_block_at_pauses_a_coroutine_until_released() -> None:
    asyncio.run(_block_at())


async def _block_at() -> None:
    points = Failpoints()
    gate = points.block_at("maintenance:finish:before")
    task = asyncio.create_task(points.reached("maintenance:finish:before"))
    await asyncio.wait_for(gate.arrived.wait(), 1)
    assert not task.done()
    gate.release()
    await asyncio.wait_for(task, 1)
    points.clear()
    await points.reached("maintenance:finish:before")
