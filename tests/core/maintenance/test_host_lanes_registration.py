"""Declaring host lanes: ``@app.lane`` refuses a bad declaration at decoration time (before the
handler is even given), with the library's ``SchedulingError``; a good one is registered with
its phase and its allowance in whole milliseconds."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

import threadline
from threadline import Application, LaneContext, LanePhase, SchedulingError


async def _idle(ctx: LaneContext) -> datetime | None:
    return None


@pytest.mark.parametrize("lane_id", ["threadline:mine", "threadline:recovery-events"])
def test_a_lane_id_under_the_reserved_prefix_is_refused_at_decoration(lane_id: str) -> None:
    app = Application()
    with pytest.raises(SchedulingError, match="reserved prefix"):
        app.lane(lane_id)
    assert len(app.lanes) == 0


def test_a_duplicate_lane_id_is_refused_at_decoration() -> None:
    app = Application()
    app.lane("sync")(_idle)
    with pytest.raises(SchedulingError, match="already declared"):
        app.lane("sync", phase="after-native")
    assert [lane.phase for lane in app.lanes] == [LanePhase.CONCURRENT]


@pytest.mark.parametrize("lane_id", ["", "Upper", "-dash", "x" * 65, "sp ace", 7])
def test_a_malformed_lane_id_is_refused_at_decoration(lane_id: Any) -> None:
    with pytest.raises(SchedulingError):
        Application().lane(lane_id)


@pytest.mark.parametrize("timeout", [
    timedelta(0), timedelta(microseconds=999), timedelta(seconds=300, milliseconds=1),
    timedelta(seconds=-1), 30, 30.0, None,
])
def test_an_allowance_outside_1ms_to_300s_is_refused_at_decoration(timeout: Any) -> None:
    with pytest.raises(SchedulingError, match="dispatch_timeout"):
        Application().lane("sync", dispatch_timeout=timeout)


@pytest.mark.parametrize("phase", ["after_native", "later", "", None, LanePhase])
def test_an_unknown_phase_is_refused_at_decoration(phase: Any) -> None:
    with pytest.raises(SchedulingError, match="phase"):
        Application().lane("sync", phase=phase)


def test_a_handler_that_is_not_callable_is_refused() -> None:
    with pytest.raises(SchedulingError, match="callable"):
        Application().lane("sync")("not a function")  # type: ignore[arg-type]


@pytest.mark.parametrize(("timeout", "ms"), [
    (timedelta(milliseconds=1), 1),
    (timedelta(microseconds=1_500), 2),  # a fraction of a millisecond rounds up
    (timedelta(seconds=30), 30_000),
    (timedelta(minutes=5), 300_000),
])
def test_a_declared_lane_keeps_its_phase_and_allowance_in_milliseconds(
    timeout: timedelta, ms: int
) -> None:
    app = Application()
    decorated = app.lane("digest.daily", phase="after-native", dispatch_timeout=timeout)(_idle)
    assert decorated is _idle
    declared = app.lanes.get("digest.daily")
    assert declared is not None
    assert declared.phase is LanePhase.AFTER_NATIVE and declared.dispatch_timeout_ms == ms
    assert "digest.daily" in app.lanes.ids


def test_the_default_allowance_is_30_seconds_and_the_default_phase_concurrent() -> None:
    app = Application()
    app.lane("sync")(_idle)
    declared = app.lanes.get("sync")
    assert declared is not None
    assert declared.phase is LanePhase.CONCURRENT and declared.dispatch_timeout_ms == 30_000


def test_the_lane_names_are_public() -> None:
    assert {"LaneContext", "LanePhase"} <= set(threadline.__all__)
    assert threadline.LaneContext.__doc__ and threadline.LanePhase.__doc__
    assert threadline.Application.lane.__doc__
