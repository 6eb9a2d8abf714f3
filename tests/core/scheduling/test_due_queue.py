from __future__ import annotations

import random
from dataclasses import replace

import pytest

from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import SchedulingError, StorageError
from threadline.scheduling import (
    NATIVE,
    PARKED_RETRY_MS,
    DueQueue,
    Lane,
    LaneState,
    backoff_ms,
    validate_host_lane_id,
)
from threadline.storage import SqliteStorage

HOST = "billing.sync"


def _lane(queue: DueQueue, lane_id: str = HOST) -> Lane:
    lane = queue.get(lane_id)
    assert lane is not None
    return lane


def test_register_creates_an_idle_row_once(queue: DueQueue) -> None:
    assert queue.get(HOST) is None
    queue.register(HOST)
    queue.register(HOST)
    lane = _lane(queue)
    assert (lane.state, lane.due_at, lane.revision, lane.stalls) == (LaneState.IDLE, None, 0, 0)
    with pytest.raises(SchedulingError):
        queue.register("threadline:unknown")


def test_enroll_makes_due_no_later_and_bumps_revision(queue: DueQueue) -> None:
    queue.enroll(HOST, 5_000)
    assert (_lane(queue).due_at, _lane(queue).revision, _lane(queue).state) == (
        5_000, 1, LaneState.DUE)
    queue.enroll(HOST, 9_000)  # later: keeps the earlier deadline
    assert (_lane(queue).due_at, _lane(queue).revision) == (5_000, 2)
    queue.enroll(HOST, 3_000)
    assert _lane(queue).due_at == 3_000


def test_enroll_without_progress_never_passes_the_retry_floor(
    queue: DueQueue, clock: ManualClock
) -> None:
    now = clock.now_ms()
    queue.enroll(HOST, now)
    charged = queue.claim(_lane(queue), now)
    assert charged is not None and charged.due_at is not None
    floor = charged.not_before
    assert floor == charged.due_at > now
    queue.enroll(HOST, now)
    assert _lane(queue).due_at == floor
    assert _lane(queue).stalls == 1
    queue.enroll(HOST, now, progress=True)
    lane = _lane(queue)
    assert (lane.due_at, lane.not_before, lane.stalls) == (now, 0, 0)


def test_stale_claim_returns_none(queue: DueQueue, clock: ManualClock) -> None:
    now = clock.now_ms()
    queue.enroll(HOST, now)
    snapshot = _lane(queue)
    queue.enroll(HOST, now)  # a producer raced the snapshot
    assert queue.claim(snapshot, now) is None
    fresh = _lane(queue)
    assert queue.claim(fresh, now) is not None
    assert queue.claim(fresh, now) is None  # the same snapshot never charges twice
    assert _lane(queue).stalls == 1


def test_claim_of_an_idle_lane_returns_none(queue: DueQueue, clock: ManualClock) -> None:
    queue.register(HOST)
    assert queue.claim(_lane(queue), clock.now_ms()) is None


def test_claim_charges_and_moves_to_the_crash_fallback(
    queue: DueQueue, clock: ManualClock, config: RuntimeConfig
) -> None:
    now = clock.now_ms()
    queue.enroll(HOST, now)
    charged = queue.claim(_lane(queue), now)
    assert charged is not None
    assert charged == _lane(queue)
    assert charged.stalls == 1
    assert now + 1_000 <= charged.due_at <= now + 2_000  # backoff(1) = base*2, jittered


def test_producer_during_a_wave_stays_due_after_complete(
    queue: DueQueue, clock: ManualClock
) -> None:
    now = clock.now_ms()
    queue.enroll(HOST, now)
    charged = queue.claim(_lane(queue), now)
    assert charged is not None
    queue.enroll(HOST, now, progress=True)  # new work while the wave runs
    assert not queue.complete(charged, None)
    lane = _lane(queue)
    assert lane.state is LaneState.DUE and lane.due_at == now
    assert lane.revision == charged.revision + 1
    # The next wave sees the newer revision and may complete it.
    again = queue.claim(lane, now)
    assert again is not None and queue.complete(again, None)
    assert _lane(queue).state is LaneState.IDLE


def test_idle_completion_replenishes_the_budget(queue: DueQueue, clock: ManualClock) -> None:
    now = clock.now_ms()
    queue.enroll(HOST, now)
    charged = queue.claim(_lane(queue), now)
    assert charged is not None and queue.complete(charged, None)
    lane = _lane(queue)
    assert (lane.state, lane.due_at, lane.stalls, lane.not_before) == (LaneState.IDLE, None, 0, 0)
    assert queue.complete(charged, None)  # same revision: idempotent, still idle
    assert _lane(queue) == lane


def test_due_completion_keeps_the_budget(queue: DueQueue, clock: ManualClock) -> None:
    now = clock.now_ms()
    queue.enroll(HOST, now)
    charged = queue.claim(_lane(queue), now)
    assert charged is not None and queue.complete(charged, now + 10)
    lane = _lane(queue)
    assert (lane.state, lane.due_at, lane.stalls, lane.not_before) == (
        LaneState.DUE, now + 10, 1, now + 10)


def test_parks_after_n_stalls_retries_hourly_and_reports_once(
    queue: DueQueue, clock: ManualClock, config: RuntimeConfig
) -> None:
    queue.enroll(HOST, clock.now_ms())
    for stall in range(1, config.park_after_stalls + 1):
        now = clock.now_ms()
        lane = _lane(queue)
        charged = queue.claim(lane, now)
        assert charged is not None and charged.stalls == stall
        assert queue.complete(charged, now + backoff_ms(stall, config, random.Random(1)))
        clock.set(_lane(queue).due_at or 0)
    parked = _lane(queue)
    assert parked.state is LaneState.PARKED
    parked_at = parked.due_at
    assert parked_at is not None and parked.not_before == parked_at
    assert queue.take_parked_reports() == [replace(parked, reported=True)]
    assert queue.take_parked_reports() == []
    # A hint does not accelerate a parked lane, nor does a failed wave's short backoff.
    queue.enroll(HOST, clock.now_ms())
    assert _lane(queue).due_at == parked_at
    clock.set(parked_at)
    charged = queue.claim(_lane(queue), clock.now_ms())
    assert charged is not None and charged.state is LaneState.PARKED
    assert charged.due_at == clock.now_ms() + PARKED_RETRY_MS
    assert queue.complete(charged, clock.now_ms() + 5)
    assert _lane(queue).due_at == clock.now_ms() + PARKED_RETRY_MS
    assert queue.take_parked_reports() == []  # still the same parking: not reported again
    # Progress unparks and replenishes; parking again is reported again.
    queue.enroll(HOST, clock.now_ms(), progress=True)
    lane = _lane(queue)
    assert (lane.state, lane.stalls, lane.reported) == (LaneState.DUE, 0, False)


def test_a_waves_progress_replenishes_the_lane_it_holds_and_keeps_its_revision(
    queue: DueQueue, clock: ManualClock, config: RuntimeConfig
) -> None:
    now = clock.now_ms()
    queue.enroll(HOST, now)
    for _ in range(config.park_after_stalls):  # claims without progress: parked
        charged = queue.claim(_lane(queue), now)
    assert charged is not None and charged.state is LaneState.PARKED
    assert charged.due_at == now + PARKED_RETRY_MS
    # The wave holding it progresses: stalls, parking and its report reset, the crash
    # fallback comes forward; the revision stays, so the wave still completes the lane.
    assert queue.replenish(HOST, now + 1_000)
    lane = _lane(queue)
    assert (lane.state, lane.stalls, lane.reported, lane.due_at, lane.not_before) == (
        LaneState.DUE, 0, False, now + 1_000, now + 1_000)
    assert lane.revision == charged.revision
    assert queue.take_parked_reports() == []
    # Later progress of the same wave writes nothing.
    assert not queue.replenish(HOST, now + 2_000)
    assert _lane(queue) == lane
    assert queue.complete(charged, None)
    # No wave holds an idle lane: nothing to replenish.
    assert not queue.replenish(HOST, now)
    assert _lane(queue).due_at is None


def test_a_waves_progress_brings_the_crash_fallback_forward_after_a_producer_refilled_it(
    queue: DueQueue, clock: ManualClock, config: RuntimeConfig
) -> None:
    """A producer's progress during the wave resets the budget but keeps the claim's backoff
    deadline; the wave's own progress still brings that crash fallback forward, so a lane
    lost mid-wave is due again within the fallback it names."""
    now = clock.now_ms()
    queue.enroll(HOST, now)
    for _ in range(2):  # two claims without progress: the second backs off past the base
        charged = queue.claim(_lane(queue), now)
    assert charged is not None and charged.due_at is not None
    fallback = now + config.alarm_backoff_base_ms
    assert charged.due_at > fallback
    queue.enroll(HOST, now + 3_600_000, progress=True)  # a new fact, due later
    refilled = _lane(queue)
    assert (refilled.stalls, refilled.due_at, refilled.not_before) == (0, charged.due_at, 0)
    assert queue.replenish(HOST, fallback)
    assert _lane(queue).due_at == fallback


def test_progress_resets_budget_but_a_replayed_cursor_does_not_accelerate(
    queue: DueQueue, clock: ManualClock
) -> None:
    now = clock.now_ms()
    assert queue.progress(HOST, now, 5)
    charged = queue.claim(_lane(queue), now)
    assert charged is not None and charged.stalls == 1
    floor = charged.due_at
    for replay in (5, 4, 0):
        assert not queue.progress(HOST, now, replay)
        lane = _lane(queue)
        assert (lane.due_at, lane.stalls, lane.cursor) == (floor, 1, 5)
    assert queue.progress(HOST, now, 6)
    lane = _lane(queue)
    assert (lane.due_at, lane.stalls, lane.not_before, lane.cursor) == (now, 0, 0, 6)
    with pytest.raises(SchedulingError, match="a progress cursor is >= 0, got -1"):
        queue.progress(HOST, now, -1)


def test_progress_without_a_cursor_leaves_every_cursor_newer(
    queue: DueQueue, clock: ManualClock
) -> None:
    # Progress recorded by a producer names no cursor: the first real cursor still counts.
    now = clock.now_ms()
    queue.enroll(HOST, now, progress=True)
    assert _lane(queue).cursor == 0
    assert queue.progress(HOST, now, 1)
    assert _lane(queue).cursor == 1


@pytest.mark.parametrize(("lane_id", "message"), [
    ("Bad Lane", "invalid lane id 'Bad Lane'"),
    ("threadline:mine", "reserved prefix 'threadline:'"),
])
def test_host_lane_ids_are_refused_with_the_reason(lane_id: str, message: str) -> None:
    with pytest.raises(SchedulingError, match=message):
        validate_host_lane_id(lane_id)


def test_next_and_due(queue: DueQueue) -> None:
    assert queue.next() is None
    queue.enroll("b", 30)
    queue.enroll("a", 20)
    queue.register("c")
    queue.enroll(NATIVE, 40)
    assert queue.next() == 20
    assert [lane.id for lane in queue.due(30, 10)] == ["a", "b"]
    assert [lane.id for lane in queue.due(100, 1)] == ["a"]


def test_checkpoint_native(queue: DueQueue) -> None:
    queue.checkpoint_native(50)
    native = _lane(queue, NATIVE)
    assert (native.state, native.due_at, native.revision) == (LaneState.DUE, 50, 0)
    queue.checkpoint_native(None)
    assert _lane(queue, NATIVE).state is LaneState.IDLE


def test_next_is_one_indexed_row_read(clock: ManualClock, config: RuntimeConfig) -> None:
    from threadline.storage import migrate

    storage = SqliteStorage(":memory:", count_vm_steps=True)
    migrate(storage)
    queue = DueQueue(storage, config, random.Random(0))

    def fill() -> None:
        for index in range(2_000):
            queue.enroll(f"lane-{index:05d}", 10_000 + index)
            if index % 2:
                queue.register(f"idle-{index:05d}")

    storage.transaction(fill)
    before, steps = storage.meter.reading(), storage.vm_steps
    assert queue.next() == 10_000
    cost = storage.meter.reading() - before
    assert (cost.statements, cost.rows_read, cost.rows_written) == (1, 1, 0)
    assert storage.vm_steps - steps < 64 * 4  # does not grow with the 3,000 rows
    plan = storage.exec("EXPLAIN QUERY PLAN " + "SELECT due_at FROM tl_lanes WHERE due_at IS "
                        "NOT NULL ORDER BY due_at LIMIT 1").rows
    assert any("tl_lanes_due" in str(row["detail"]) for row in plan)


def test_check_constraint_guards_state(storage: SqliteStorage) -> None:
    with pytest.raises(StorageError):
        storage.exec("INSERT INTO tl_lanes (id, due_at, state) VALUES ('x', 5, 'idle')")


def test_stale_due_completion_keeps_the_producer_deadline(
    queue: DueQueue, clock: ManualClock
) -> None:
    now = clock.now_ms()
    queue.enroll(HOST, now)
    charged = queue.claim(_lane(queue), now)
    assert charged is not None
    queue.enroll(HOST, now, progress=True)
    assert not queue.complete(charged, now + 50_000)
    assert _lane(queue).due_at == now


def test_parked_reports_cover_every_parked_lane_once(
    queue: DueQueue, clock: ManualClock, config: RuntimeConfig
) -> None:
    for lane_id in ("a", "b"):
        queue.enroll(lane_id, clock.now_ms())
        for _ in range(config.park_after_stalls):
            charged = queue.claim(_lane(queue, lane_id), clock.now_ms())
            assert charged is not None
    assert [lane.id for lane in queue.take_parked_reports()] == ["a", "b"]
    assert queue.take_parked_reports() == []
    assert {lane.id: lane.reported for lane in queue.lanes()} == {"a": True, "b": True}


def test_a_claim_from_a_snapshot_taken_before_the_report_does_not_report_again(
    queue: DueQueue, clock: ManualClock, config: RuntimeConfig
) -> None:
    queue.enroll(HOST, clock.now_ms())
    for _ in range(config.park_after_stalls):
        assert queue.claim(_lane(queue), clock.now_ms()) is not None
    snapshot = _lane(queue)  # a wave reads the parked lane ...
    assert snapshot.state is LaneState.PARKED and not snapshot.reported
    assert [lane.id for lane in queue.take_parked_reports()] == [HOST]  # ... it is reported ...
    charged = queue.claim(snapshot, clock.now_ms())  # ... then the wave charges its snapshot
    assert charged is not None and charged.reported
    assert _lane(queue).reported
    assert queue.take_parked_reports() == []


def test_enroll_reports_false_only_for_a_native_hint_that_moves_nothing(queue: DueQueue) -> None:
    assert queue.enroll(NATIVE, 5_000) is True
    assert queue.enroll(NATIVE, 9_000) is False  # later than its deadline: nothing written
    assert queue.enroll(NATIVE, 4_000) is True
    # Progress, and every enrollment of another lane, report True even when already due.
    assert queue.enroll(NATIVE, 4_000, progress=True) is True
    assert queue.enroll(NATIVE, 4_000, progress=True) is True
    assert queue.enroll("mail", 5_000) is True
    assert queue.enroll("mail", 9_000) is True
    assert queue.enroll("mail", 9_000, progress=True) is True


def test_defer_moves_only_lanes_due_before_the_deadline(
    queue: DueQueue, storage: SqliteStorage
) -> None:
    queue.enroll(HOST, 100)
    queue.enroll("other.lane", 9_000)
    queue.register("idle.lane")
    before = _lane(queue)
    assert queue.defer(5_000) == 1
    deferred = _lane(queue)
    assert deferred.due_at == 5_000
    # Neither a claim nor an enrollment: no stall, no floor, no revision.
    assert replace(deferred, due_at=before.due_at) == before
    assert _lane(queue, "other.lane").due_at == 9_000
    assert _lane(queue, "idle.lane").due_at is None
    # A producer still makes the lane due earlier.
    queue.enroll(HOST, 200)
    assert _lane(queue).due_at == 200
    assert queue.defer(5_000) == 1 and queue.defer(5_000) == 0


def test_a_held_lane_is_due_no_earlier_than_its_hold_and_no_other_lane_moves(
    queue: DueQueue,
) -> None:
    for lane_id, due in (("a.lane", 10), ("b.lane", 20), ("c.lane", 30)):
        queue.enroll(lane_id, due)
    queue.hold("a.lane", 25)
    assert queue.next() == 20  # the next lane not held
    assert [lane.id for lane in queue.due(24)] == ["b.lane"]
    queue.hold("b.lane", 40)
    assert queue.next() == 25  # the end of a hold, when it comes first
    queue.hold("c.lane", 27)
    assert queue.next() == 25
    assert [lane.id for lane in queue.due(30)] == ["a.lane", "c.lane"]
    assert [lane.id for lane in queue.due(30, limit=1)] == ["a.lane"]
    assert queue.held_until("b.lane") == 40 and queue.held_until("d.lane") is None
    # The rows themselves are untouched: another incarnation's queue sees them as stored.
    assert _lane(queue, "a.lane").due_at == 10
    for lane_id in ("a.lane", "b.lane", "c.lane"):
        queue.release(lane_id)
    assert queue.next() == 10
    queue.release("a.lane")  # not held: nothing to do
    with pytest.raises(SchedulingError):
        queue.hold(NATIVE, 50)


def test_holds_on_lanes_not_due_leave_the_earliest_due_alone(queue: DueQueue) -> None:
    queue.enroll("a.lane", 10)
    queue.hold("b.lane", 5)  # idle lanes: nothing of theirs is due
    queue.hold("c.lane", 5)
    assert queue.next() == 10
    queue.hold("a.lane", 12)
    assert queue.next() == 12


def test_a_held_lane_takes_no_place_of_a_due_one_within_the_limit(queue: DueQueue) -> None:
    # The earliest due lane is held: the read reaches past it, so a limit of one still
    # yields the next lane that is really due.
    queue.enroll("a.lane", 10)
    queue.enroll("b.lane", 20)
    queue.hold("a.lane", 100)
    assert [lane.id for lane in queue.due(30, limit=1)] == ["b.lane"]
