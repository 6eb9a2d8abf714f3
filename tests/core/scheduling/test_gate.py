from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import pytest
from sched_support import run_async

from threadline.clock import ManualClock
from threadline.errors import Evicted, SchedulingError
from threadline.scheduling import NATIVE, PUBLICATION, LaneState, Scheduler, read_state, state
from threadline.storage import SqliteStorage

HOST = "outbox.push"
T = TypeVar("T")


def _facts(storage: SqliteStorage) -> int:
    storage.exec("CREATE TABLE IF NOT EXISTS facts (v INTEGER)")
    return int(storage.exec("SELECT count(*) FROM facts").scalar())


class _LostAtCommit(Evicted):
    """The object is lost the instant its outermost transaction commits."""


def _evict_at_commit(storage: SqliteStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lose the object right after the next outermost commit: nothing after it runs.

    What a producer writes after its transaction (an alarm, say) is then never written, so
    what the storage holds at that point is exactly what the transaction committed.
    """
    real = storage.transaction

    def transaction(fn: Callable[[], T]) -> T:
        outermost = not storage.in_transaction()
        result = real(fn)
        if outermost:
            monkeypatch.setattr(storage, "transaction", real)
            raise _LostAtCommit("lost at commit")
        return result

    monkeypatch.setattr(storage, "transaction", transaction)


def test_mutate_commits_facts_enrollment_generation_and_alarm_together(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _facts(storage)
    now = clock.now_ms()
    before = read_state(storage).dirty
    _evict_at_commit(storage, monkeypatch)
    with pytest.raises(_LostAtCommit):
        sched.gate.mutate(lambda: storage.exec("INSERT INTO facts VALUES (1)"), lanes=[HOST])
    # Checked at the eviction point, before any restart or ensure_alarm(): the commit alone
    # holds the fact, the enrollment, the newer generation and the alarm.
    assert _facts(storage) == 1
    assert read_state(storage).dirty == before + 1
    for lane_id in (NATIVE, HOST):
        lane = sched.due_queue.get(lane_id)
        assert lane is not None and lane.state is LaneState.DUE and lane.due_at == now
    assert storage.known_alarm() == now + sched.config.min_alarm_delay_ms


def test_mutate_returns_what_its_body_returns(sched: Scheduler, storage: SqliteStorage) -> None:
    _facts(storage)
    assert sched.gate.mutate(
        lambda: storage.exec("INSERT INTO facts VALUES (1)").rows_written, lanes=[HOST]) == 1


@run_async
async def test_mutation_prearm_commits_enrollment_generation_and_alarm_together(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = clock.now_ms()
    before = read_state(storage).dirty
    _evict_at_commit(storage, monkeypatch)
    with pytest.raises(_LostAtCommit):
        async with sched.gate.mutation(lanes=[HOST]):
            raise AssertionError("the body runs after the prearm committed")
    assert read_state(storage).dirty == before + 1
    for lane_id in (NATIVE, HOST):
        lane = sched.due_queue.get(lane_id)
        assert lane is not None and lane.state is LaneState.DUE and lane.due_at == now
    assert storage.known_alarm() == now + sched.config.min_alarm_delay_ms


def test_schedule_commits_enrollment_and_alarm_together(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    due = clock.now_ms() + 60_000
    _evict_at_commit(storage, monkeypatch)
    with pytest.raises(_LostAtCommit):
        sched.gate.schedule(HOST, due)
    lane = sched.due_queue.get(HOST)
    assert lane is not None and lane.due_at == due
    assert storage.known_alarm() == due


def test_mutate_failure_commits_nothing(sched: Scheduler, storage: SqliteStorage) -> None:
    _facts(storage)
    storage.set_alarm(123)
    before = read_state(storage)

    def body() -> None:
        storage.exec("INSERT INTO facts VALUES (1)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        sched.gate.mutate(body, lanes=[HOST])
    assert _facts(storage) == 0
    assert read_state(storage) == before
    assert sched.due_queue.get(HOST) is None
    assert storage.known_alarm() == 123


def test_mutate_keeps_an_earlier_alarm(sched: Scheduler, storage: SqliteStorage) -> None:
    storage.set_alarm(5)
    sched.gate.mutate(lambda: None)
    assert storage.known_alarm() == 5


def test_mutate_without_lanes_or_recovery_writes_no_scheduling_state(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    before = storage.meter.reading()
    sched.gate.mutate(lambda: None, invalidates_recovery=False)
    cost = storage.meter.reading() - before
    assert (cost.rows_written, cost.alarm_writes) == (0, 0)
    assert storage.known_alarm() is None


def test_record_progress_requires_the_source_transaction(sched: Scheduler) -> None:
    with pytest.raises(SchedulingError):
        sched.gate.record_progress([HOST])


def test_record_progress_inside_mutate_replenishes_its_lanes(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    now = clock.now_ms()
    sched.due_queue.enroll(HOST, now)
    charged = sched.due_queue.claim(sched.due_queue.get(HOST), now)  # type: ignore[arg-type]
    assert charged is not None and charged.stalls == 1
    sched.gate.mutate(lambda: sched.gate.record_progress([]), lanes=[HOST],
                      invalidates_recovery=False)
    lane = sched.due_queue.get(HOST)
    assert lane is not None and (lane.stalls, lane.due_at, lane.not_before) == (0, now, 0)


def test_record_progress_without_required_publication_enrolls_no_publication_lane(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    # Nothing drains the publication lane unless a destination requires publication: enrolling
    # it would defer every Thread behind a lane nobody serves.
    assert not sched.gate.publication_required
    before = read_state(storage).dirty
    storage.transaction(lambda: sched.gate.record_progress([PUBLICATION]))
    sched.gate.mutate(lambda: None, lanes=[PUBLICATION], invalidates_recovery=False)
    assert sched.due_queue.get(PUBLICATION) is None
    assert read_state(storage).dirty == before


def test_record_progress_on_required_publication_dirties_native(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    sched.gate.publication_required = True
    before = read_state(storage).dirty
    storage.transaction(lambda: sched.gate.record_progress([PUBLICATION]))
    assert read_state(storage).dirty == before + 1
    native = sched.due_queue.get(NATIVE)
    assert native is not None and native.state is LaneState.DUE


def test_schedule_outside_and_inside_a_transaction(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    now = clock.now_ms()
    sched.gate.schedule(HOST, now + 60_000)
    assert storage.known_alarm() == now + 60_000
    storage.transaction(lambda: sched.gate.schedule("timer", now + 10_000))
    assert storage.known_alarm() == now + 10_000

    def rolled_back() -> None:
        sched.gate.schedule("other", now + 5_000)
        raise RuntimeError

    with pytest.raises(RuntimeError):
        storage.transaction(rolled_back)
    assert storage.known_alarm() == now + 10_000
    assert sched.due_queue.get("other") is None


def test_schedule_native_progress_bumps_generation(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    before = read_state(storage).dirty
    hint = sched.gate.generations
    sched.gate.schedule(NATIVE, clock.now_ms(), progress_cursor=3)
    sched.gate.schedule(NATIVE, clock.now_ms(), progress_cursor=3)  # replayed: no bump
    assert read_state(storage).dirty == before + 1
    # The in-memory hint a pass compares moves with every bump, by one.
    assert sched.gate.generations == hint + 1
    sched.gate.schedule(PUBLICATION, clock.now_ms(), progress_cursor=1)
    assert read_state(storage).dirty == before + 2
    assert sched.gate.generations == hint + 2


@run_async
async def test_mutation_prearms_before_the_body_and_tracks_it(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    seen: list[object] = []
    async with sched.gate.mutation(lanes=[HOST]):
        seen.append(storage.known_alarm())
        seen.append(sched.gate.active_lanes())
        with sched.gate.snapshot() as active:
            seen.append(active)
        await asyncio.sleep(0)
    assert seen == [clock.now_ms() + sched.config.min_alarm_delay_ms,
                    frozenset({NATIVE, HOST}), 1]
    assert sched.gate.active_lanes() == frozenset()
    with sched.gate.snapshot() as active:
        assert active == 0


@run_async
async def test_mutation_refused_inside_a_transaction(sched: Scheduler,
                                                     storage: SqliteStorage) -> None:
    cm = sched.gate.mutation()

    def inside() -> None:
        coro = cm.__aenter__()
        try:
            coro.send(None)
        finally:
            coro.close()

    with pytest.raises(SchedulingError):
        storage.transaction(inside)


@run_async
async def test_failed_mutation_body_leaves_the_prearm_due(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    with pytest.raises(RuntimeError):
        async with sched.gate.mutation(lanes=[HOST], invalidates_recovery=False):
            raise RuntimeError("body failed")
    lane = sched.due_queue.get(HOST)
    assert lane is not None and lane.state is LaneState.DUE
    assert storage.known_alarm() is not None
    assert sched.gate.active == 0 and sched.gate.active_lanes() == frozenset()


@run_async
async def test_await_change_wakes_on_a_commit(sched: Scheduler) -> None:
    rev = sched.gate.revision
    waiter = asyncio.create_task(sched.gate.await_change(rev))
    await asyncio.sleep(0)
    assert not waiter.done()
    sched.gate.schedule(HOST, 1)
    await asyncio.wait_for(waiter, 1)
    # Already changed: returns at once (bounded, so a hang fails instead of blocking the run).
    await asyncio.wait_for(sched.gate.await_change(rev), 1)


@run_async
async def test_changed_is_a_future_resolved_by_the_next_commit(sched: Scheduler) -> None:
    rev = sched.gate.revision
    first, dropped = sched.gate.changed(rev), sched.gate.changed(rev)
    assert not first.done() and not isinstance(first, asyncio.Task)
    dropped.cancel()  # a waiter that stopped waiting is passed over, never resolved
    sched.gate.schedule(HOST, 1)
    assert first.done() and first.result() is None and dropped.cancelled()
    # Asked with a revision already left behind: resolved from the start.
    assert sched.gate.changed(rev).done()
    assert not sched.gate.changed(sched.gate.revision).done()


@run_async
async def test_eviction_at_dirty_after_keeps_prearm(sched: Scheduler,
                                                    storage: SqliteStorage) -> None:
    sched.failpoints.evict_at("maintenance:dirty:after")
    with pytest.raises(Evicted):
        async with sched.gate.mutation(lanes=[HOST]):
            raise AssertionError("body must not run")
    assert sched.due_queue.get(HOST) is not None
    assert storage.known_alarm() is not None


def test_ensure_alarm_covers_a_dirty_new_object(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    state = read_state(storage)
    assert (state.dirty, state.processed) == (1, 0)
    sched.gate.ensure_alarm()
    native = sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at == clock.now_ms()
    assert storage.known_alarm() == clock.now_ms() + sched.config.min_alarm_delay_ms
    sched.gate.ensure_alarm()
    assert storage.known_alarm() == clock.now_ms() + sched.config.min_alarm_delay_ms


def test_record_progress_alone_arms_the_alarm(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    before = read_state(storage).dirty
    storage.transaction(lambda: sched.gate.record_progress([HOST]))
    # Progress on a host lane is not native work: no generation, no native enrollment.
    assert read_state(storage).dirty == before
    assert sched.due_queue.get(NATIVE) is None
    assert storage.known_alarm() == clock.now_ms() + sched.config.min_alarm_delay_ms
    lane = sched.due_queue.get(HOST)
    assert lane is not None and lane.due_at == clock.now_ms()


@run_async
async def test_native_stays_active_until_release_other_lanes_free_after_commit(
    sched: Scheduler,
) -> None:
    gate_point = sched.failpoints.block_at("maintenance:mutation:finished")

    async def producer() -> None:
        async with sched.gate.mutation(lanes=[HOST]):
            pass

    task = asyncio.create_task(producer())
    await asyncio.wait_for(gate_point.arrived.wait(), 1)
    assert sched.gate.active_lanes() == frozenset({NATIVE})
    with sched.gate.snapshot() as active:
        assert active == 1
    gate_point.release()
    await asyncio.wait_for(task, 1)
    assert sched.gate.active_lanes() == frozenset()
    assert sched.gate.active == 0


def test_eviction_inside_the_body_commits_nothing(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    _facts(storage)
    before = read_state(storage)

    def body() -> None:
        storage.exec("INSERT INTO facts VALUES (1)")
        sched.failpoints.hit("settle:before")

    sched.failpoints.evict_at("settle:before")
    with pytest.raises(Evicted):
        sched.gate.mutate(body, lanes=[HOST])
    assert (_facts(storage), read_state(storage), storage.known_alarm()) == (0, before, None)
    assert sched.due_queue.get(HOST) is None


def test_schedule_publication_progress_is_native_progress(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    now = clock.now_ms()
    # Native work that stalled once: its retry floor lies ahead and a retry is pending.
    sched.due_queue.enroll(NATIVE, now)
    stalled = sched.due_queue.claim(sched.due_queue.get(NATIVE), now)  # type: ignore[arg-type]
    assert stalled is not None and stalled.stalls == 1 and stalled.not_before > now
    before = read_state(storage).dirty
    state.set_retry(storage, state.NativeRetry(before, now + 5_000, False, 1))
    sched.gate.schedule(PUBLICATION, now, progress_cursor=1)
    native = sched.due_queue.get(NATIVE)
    # Progress: due now, past the floor, with the stall budget replenished.
    assert native is not None and (native.due_at, native.not_before, native.stalls) == (now, 0, 0)
    after = read_state(storage)
    assert after.dirty == before + 1 and after.retry is None


def test_lanes_must_be_ids_not_a_string(sched: Scheduler) -> None:
    with pytest.raises(SchedulingError):
        sched.gate.mutate(lambda: None, lanes="abc")
    with pytest.raises(SchedulingError):
        sched.gate.mutate(lambda: None, lanes=["threadline:bogus"])


def test_record_progress_on_native_work_clears_a_pending_retry(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    generation = read_state(storage).dirty
    state.set_retry(storage, state.NativeRetry(generation, clock.now_ms() + 5_000, False, 2))
    storage.transaction(lambda: sched.gate.record_progress([NATIVE]))
    after = read_state(storage)
    assert after.dirty == generation + 1 and after.retry is None


def test_ensure_alarm_leaves_a_clean_object_without_an_alarm(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    generation = read_state(storage).dirty
    assert state.acknowledge(storage, generation)
    sched.gate.ensure_alarm()
    native = sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at is None
    assert storage.known_alarm() is None


def test_native_source_progress_does_not_dirty_the_generation(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    # The pass certifies its own settlements; only outside producers advance the generation.
    before = read_state(storage).dirty
    hint = sched.gate.generations
    with sched.gate.native_source():
        storage.transaction(lambda: sched.gate.record_progress([NATIVE]))
        sched.gate.mutate(lambda: None)
    assert read_state(storage).dirty == before
    assert sched.gate.generations == hint
    # Nor is the native lane enrolled: the pass sets it at its checkpoint.
    native = sched.due_queue.get(NATIVE)
    assert native is None or native.due_at is None
    storage.transaction(lambda: sched.gate.record_progress([NATIVE]))
    native = sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at == clock.now_ms()
    assert read_state(storage).dirty == before + 1
    assert sched.gate.generations == hint + 1


def test_native_source_is_not_seen_by_another_task(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    async def body() -> None:
        async def producer() -> None:
            storage.transaction(lambda: sched.gate.record_progress([NATIVE]))

        before = read_state(storage).dirty
        task = asyncio.get_running_loop().create_task(producer())
        with sched.gate.native_source():
            await task
        assert read_state(storage).dirty == before + 1

    asyncio.run(body())


def test_ensure_alarm_keeps_a_pending_native_retry(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    retry_at = clock.now_ms() + 30_000
    state.set_retry(storage, state.NativeRetry(read_state(storage).dirty, retry_at, False, 1))
    sched.gate.ensure_alarm()
    native = sched.due_queue.get(NATIVE)
    # Dirty native work backing off is due at its retry, not at once.
    assert native is not None and native.due_at == retry_at
    assert storage.known_alarm() == retry_at


@pytest.mark.parametrize(("where", "committed"), [
    ("maintenance:ensure:before", False), ("maintenance:ensure:after", True)])
def test_ensure_alarm_failpoints_bracket_its_commit(
    sched: Scheduler, storage: SqliteStorage, where: str, committed: bool
) -> None:
    sched.failpoints.evict_at(where)
    with pytest.raises(Evicted):
        sched.gate.ensure_alarm()
    assert (storage.known_alarm() is not None) is committed


@run_async
async def test_each_change_wakes_the_waiters_of_the_revision_before_it(
    sched: Scheduler,
) -> None:
    for n in range(3):
        rev = sched.gate.revision
        waiter = asyncio.create_task(sched.gate.await_change(rev))
        await asyncio.sleep(0)
        assert not waiter.done(), n
        sched.gate.schedule(HOST, 1)
        await asyncio.wait_for(waiter, 1)
        assert sched.gate.revision != rev


@run_async
async def test_a_lane_stays_active_while_any_mutation_enrolling_it_is_in_flight(
    sched: Scheduler,
) -> None:
    # Publication is enrolled only while some destination requires it.
    sched.gate.publication_required = True
    lanes = [HOST, "b.lane", "c.lane", "d.lane", PUBLICATION]
    finished = sched.failpoints.block_at("maintenance:mutation:finished")
    release_second = asyncio.Event()

    async def first() -> None:
        async with sched.gate.mutation(lanes=lanes):
            pass

    async def second() -> None:
        async with sched.gate.mutation(lanes=lanes):
            await release_second.wait()

    two = asyncio.create_task(second())
    await asyncio.sleep(0)
    one = asyncio.create_task(first())
    await asyncio.wait_for(finished.arrived.wait(), 1)
    # The first body committed: every lane is still held by the second mutation.
    assert sched.gate.active_lanes() == frozenset({*lanes, NATIVE})
    finished.release()
    await asyncio.wait_for(one, 1)
    assert sched.gate.active_lanes() == frozenset({*lanes, NATIVE})
    assert sched.gate.active == 1
    sched.failpoints.clear()
    release_second.set()
    await asyncio.wait_for(two, 1)
    assert sched.gate.active_lanes() == frozenset()
    assert sched.gate.active == 0


@run_async
async def test_after_its_body_commits_a_mutation_holds_only_native_and_publication(
    sched: Scheduler,
) -> None:
    sched.gate.publication_required = True
    lanes = [PUBLICATION, HOST, "b.lane", "c.lane", "d.lane", "e.lane"]
    finished = sched.failpoints.block_at("maintenance:mutation:finished")

    async def producer() -> None:
        async with sched.gate.mutation(lanes=lanes):
            pass

    task = asyncio.create_task(producer())
    await asyncio.wait_for(finished.arrived.wait(), 1)
    assert sched.gate.active_lanes() == frozenset({NATIVE, PUBLICATION})
    finished.release()
    await asyncio.wait_for(task, 1)
    assert sched.gate.active_lanes() == frozenset()


def test_ensure_alarm_keeps_a_forced_native_retry_past_a_checkpoint(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    from threadline.scheduling import NativeRetry
    from threadline.scheduling import state as st

    now = clock.now_ms()
    dirty = read_state(storage).dirty
    st.set_retry(storage, NativeRetry(dirty, now + 40_000, True, 3))
    sched.due_queue.checkpoint_native(now)
    sched.gate.ensure_alarm()
    native = sched.due_queue.get(NATIVE)
    assert native is not None and native.due_at == now + 40_000
    assert storage.known_alarm() == now + 40_000


def test_ensure_alarm_enrolls_undelivered_recovery_events(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    from threadline.scheduling import RECOVERY_EVENTS
    from threadline.scheduling import state as st

    st.acknowledge(storage, read_state(storage).dirty)
    storage.transaction(lambda: st.append_recovery_events(storage, 2))
    sched.gate.ensure_alarm()
    lane = sched.due_queue.get(RECOVERY_EVENTS)
    assert lane is not None and lane.due_at == clock.now_ms()
    assert storage.known_alarm() == clock.now_ms() + sched.config.min_alarm_delay_ms


def test_the_pass_arms_an_empty_slot_no_sooner_than_min_delay_past_its_crash_fallback(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    # A pass still running after its crash fallback: the empty slot gets now + min_delay,
    # not the passed fallback (an alarm in the past fires at once, again and again).
    fallback = clock.now_ms() + 100
    storage.transaction(lambda: sched.due_queue.checkpoint_native(fallback))
    storage.delete_alarm()
    clock.advance(10_000)
    with sched.gate.native_source(crash_fallback=fallback, retry_recorded=False):
        storage.transaction(lambda: sched.gate.record_progress([NATIVE]))
    assert storage.known_alarm() == clock.now_ms() + sched.config.min_alarm_delay_ms


def test_pass_progress_that_drops_the_retry_replenishes_a_charged_native_lane(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    now = clock.now_ms()
    # A charged native lane (its retry floor ahead, a stall counted) and a pending retry.
    sched.due_queue.enroll(NATIVE, now)
    stalled = sched.due_queue.claim(sched.due_queue.get(NATIVE), now)  # type: ignore[arg-type]
    assert stalled is not None and stalled.stalls == 1 and stalled.not_before > now
    dirty = read_state(storage).dirty
    state.set_retry(storage, state.NativeRetry(dirty, now + 5_000, True, 1))
    with sched.gate.native_source(crash_fallback=now + 8_000, retry_recorded=True):
        storage.transaction(lambda: sched.gate.record_progress([NATIVE]))
    # Progress: due now, past the floor, the budget replenished; the pass certifies it.
    native = sched.due_queue.get(NATIVE)
    assert native is not None and (native.due_at, native.not_before, native.stalls) == (now, 0, 0)
    assert read_state(storage).retry is None and read_state(storage).dirty == dirty


@run_async
async def test_each_prearm_outside_the_pass_moves_the_generation_hint_by_one(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    before = read_state(storage).dirty
    hint = sched.gate.generations
    for _ in range(2):
        async with sched.gate.mutation(lanes=[HOST]):
            pass
    assert read_state(storage).dirty == before + 2
    assert sched.gate.generations == hint + 2
    # The pass's own mutations move neither.
    with sched.gate.native_source():
        async with sched.gate.mutation(lanes=[HOST]):
            pass
    assert (read_state(storage).dirty, sched.gate.generations) == (before + 2, hint + 2)


@run_async
async def test_a_native_prearm_inside_the_pass_arms_an_empty_slot_at_its_crash_fallback(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    fallback = clock.now_ms() + 5_000
    storage.transaction(lambda: sched.due_queue.checkpoint_native(fallback))
    storage.delete_alarm()  # the platform empties the slot when the alarm fires
    native = sched.due_queue.get(NATIVE)
    with sched.gate.native_source(crash_fallback=fallback):
        async with sched.gate.mutation():
            pass
    # The native lane is the pass's to set: not enrolled; the empty slot gets the fallback.
    assert sched.due_queue.get(NATIVE) == native
    assert storage.known_alarm() == fallback
