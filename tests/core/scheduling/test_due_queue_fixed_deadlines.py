"""A lane's own fixed deadline (a schedule's next fire) beats its backoff and a parking's hourly
floor without unparking it, never postpones it, and leaves its revision; a deadline a new
declaration replaces is set exactly, with a fresh budget."""

from __future__ import annotations

import pytest

from threadline.errors import SchedulingError
from threadline.scheduling import NATIVE, PARKED_RETRY_MS, DueQueue, Lane, LaneState

HOST = "digest"


def _lane(queue: DueQueue) -> Lane:
    lane = queue.get(HOST)
    assert lane is not None
    return lane


def _parked(queue: DueQueue, now: int) -> Lane:
    queue.enroll(HOST, now)
    lane = _lane(queue)
    while lane.state is not LaneState.PARKED:
        claimed = queue.claim(lane, now)
        assert claimed is not None
        lane = claimed
    return _lane(queue)


def test_bring_forward_beats_the_parked_floor_and_keeps_the_parking(queue: DueQueue) -> None:
    now = 1_000_000
    parked = _parked(queue, now)
    assert parked.due_at == parked.not_before == now + PARKED_RETRY_MS
    assert queue.bring_forward(HOST, now + 60_000) is True
    after = _lane(queue)
    assert (after.due_at, after.not_before) == (now + 60_000, now + 60_000)
    assert (after.state, after.stalls, after.revision) == (
        LaneState.PARKED, parked.stalls, parked.revision)
    # Never later, and nothing written when the lane is due by then already.
    assert queue.bring_forward(HOST, now + 120_000) is False
    assert _lane(queue).due_at == now + 60_000


def test_bring_forward_leaves_an_idle_lane_alone(queue: DueQueue) -> None:
    queue.register(HOST)
    assert queue.bring_forward(HOST, 5_000) is False
    assert _lane(queue).due_at is None


def test_reschedule_sets_the_deadline_exactly_with_a_fresh_budget(queue: DueQueue) -> None:
    now = 1_000_000
    parked = _parked(queue, now)
    queue.reschedule(HOST, now + 2 * PARKED_RETRY_MS)  # later than it was due: set all the same
    after = _lane(queue)
    assert (after.due_at, after.not_before, after.stalls, after.state, after.reported) == (
        now + 2 * PARKED_RETRY_MS, 0, 0, LaneState.DUE, False)
    assert after.revision == parked.revision + 1
    queue.reschedule("fresh", 7_000)
    fresh = queue.get("fresh")
    assert fresh is not None and (fresh.due_at, fresh.state) == (7_000, LaneState.DUE)
    with pytest.raises(SchedulingError):
        queue.reschedule(NATIVE, 7_000)
