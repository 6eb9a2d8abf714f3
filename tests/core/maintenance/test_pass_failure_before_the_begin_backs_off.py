"""Every failing pass backs off, also one that fails before it has read the generation record.

Such a pass (storage refusing that read, a failing registry reconcile) served nothing, so the
whole pass is backed off: the native retry record counts its stalls (``base * 2^stalls``
capped, jittered over [b/2, b]) and every lane due before ``not_before`` waits for it. The
record is durable, so a new incarnation keeps growing the gap; a pass that succeeds ends it.
"""

from __future__ import annotations

import asyncio
import itertools

from pass_support import CONFIG, Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.errors import StorageError
from threadline.maintenance import PassPhase
from threadline.maintenance.pass_state import BEGIN_BEFORE, FINISH_BEFORE
from threadline.scheduling import NATIVE, read_state
from threadline.storage import SqliteStorage
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState

BASE = CONFIG.alarm_backoff_base_ms
MIN_DELAY = CONFIG.min_alarm_delay_ms


def _refuse_the_begin(obj: Obj) -> list[int]:
    """Make every pass of this incarnation fail before it reads the generation record."""
    failed: list[int] = []

    def refuse(location: str) -> None:
        failed.append(obj.clock.now_ms())
        raise StorageError("the generation record could not be read")

    obj.failpoints.install(BEGIN_BEFORE, refuse)
    return failed


async def _fire_at_slot(obj: Obj) -> None:
    slot = obj.storage.known_alarm()
    assert slot is not None
    obj.clock.set(max(slot, obj.clock.now_ms()))
    report = await obj.fire()
    assert report.phase is PassPhase.FAILED


def _gaps(times: list[int]) -> list[int]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def _assert_doubling(gaps: list[int]) -> None:
    """The gap after the ``i``-th failure in a row (from 0) is ``backoff(i)``: within
    ``[b/2, b]`` for ``b = base * 2^i`` (capped), so it doubles instead of staying 500 ms."""
    for i, gap in enumerate(gaps):
        ceiling = min(CONFIG.alarm_backoff_cap_ms, BASE << i)
        assert ceiling // 2 <= gap <= ceiling, (i, gaps)


def test_a_pass_failing_before_the_generation_read_backs_off_durably(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        sub = obj.admit("t1", {"n": 1})
        failed = _refuse_the_begin(obj)
        for _ in range(5):
            await _fire_at_slot(obj)
        # The gaps double (with jitter) instead of repeating the 500 ms minimum delay.
        _assert_doubling(_gaps(failed))
        retry = read_state(raw_storage).pending_retry
        assert retry is not None and retry.stalls == 5 and not retry.native_only
        native = obj.space.scheduler.due_queue.get(NATIVE)
        assert native is not None and native.due_at == retry.not_before
        assert raw_storage.known_alarm() == retry.not_before
        assert [line for line in obj.logs if "maintenance pass failed" in line][-1].startswith(
            "threadline: maintenance pass failed error_type=StorageError")

        # Storage is back: the next pass runs at the slot and its success ends the backoff.
        obj.failpoints.clear(BEGIN_BEFORE)
        reports = await obj.run()
        assert reports[0].phase is PassPhase.ACTIONABLE
        assert obj.get(sub.id).state is SubmissionState.SETTLED
        assert read_state(raw_storage).retry is None

    run(body())


def test_the_backoff_survives_eviction_and_a_success_ends_it(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", {"n": 1})
        failed = _refuse_the_begin(obj)
        for _ in range(3):
            await _fire_at_slot(obj)
        slot = raw_storage.known_alarm()
        # A new incarnation (its start-up re-arms from the queue) keeps the backed-off slot...
        await obj.evict()
        assert raw_storage.known_alarm() == slot
        failed_later = _refuse_the_begin(obj)
        for _ in range(3):
            await _fire_at_slot(obj)
        # ... and the gaps keep growing where they were, not from the minimum delay again.
        times = failed + failed_later
        _assert_doubling(_gaps(times))
        assert read_state(raw_storage).retry.stalls == 6  # type: ignore[union-attr]

        # A success ends the backoff: the next failure starts from the base again.
        obj.failpoints.clear(BEGIN_BEFORE)
        await obj.run()
        assert read_state(raw_storage).retry is None
        obj.admit("t2", {"n": 2})
        again = _refuse_the_begin(obj)
        await _fire_at_slot(obj)
        await _fire_at_slot(obj)
        assert BASE // 2 <= _gaps(again)[0] <= BASE
        assert read_state(raw_storage).retry.stalls == 2  # type: ignore[union-attr]

    run(body())


def test_the_whole_pass_is_backed_off_not_only_native_work(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """A lane due when the pass failed waits for the backoff too: the slot is the truth of
    the queue, so nothing (a start-up, a later decision) brings back the 500 ms cadence."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        served: list[int] = []

        async def lane(now: int, deadline: int) -> int | None:
            served.append(now)
            return None

        obj.space.lanes.register("host.lane", lane, dispatch_timeout_ms=1_000)
        obj.space.scheduler.gate.schedule("host.lane", clock.now_ms())
        failed = _refuse_the_begin(obj)
        for _ in range(4):
            await _fire_at_slot(obj)
        _assert_doubling(_gaps(failed))
        retry = read_state(raw_storage).retry
        assert retry is not None and retry.stalls == 4
        host = obj.space.scheduler.due_queue.get("host.lane")
        assert host is not None and host.due_at == retry.not_before
        assert served == []
        obj.failpoints.clear(BEGIN_BEFORE)
        await obj.run()
        assert served == [retry.not_before]
        assert read_state(raw_storage).retry is None

    run(body())


def test_a_racing_producer_is_not_postponed_by_a_failure_before_the_begin(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", {"n": 1})

        def race_then_refuse(location: str) -> None:
            obj.admit("t2", {"n": 2})  # a producer commits while the pass is under way
            raise StorageError("the generation record could not be read")

        obj.failpoints.install(BEGIN_BEFORE, race_then_refuse)
        await _fire_at_slot(obj)
        assert read_state(raw_storage).retry is None
        slot = raw_storage.known_alarm()
        assert slot is not None and slot <= clock.now_ms() + MIN_DELAY

    run(body())


def test_a_failing_registry_reconcile_backs_off() -> None:
    """The registry key changed (a deployment) and storing it keeps failing: each pass fails
    at its begin, and the passes back off instead of firing every 500 ms."""

    async def body() -> list[int]:
        async with SimulatedObject(echo_app(), check_alarm_invariant=True) as obj:
            await obj.run_alarms()
            obj.admit("t1", "echo", {"n": 1})
            obj.storage.exec("UPDATE tl_maintenance SET binding_registry_key = 'a-former-one'")
            refusal = obj.fail_statements("SET binding_registry_key", times=5)
            times: list[int] = []
            while refusal.remaining > 0:
                slot = obj.alarm_at
                assert slot is not None
                await obj.run_alarms(until=slot)
                times.append(slot)
            assert all(report.phase is PassPhase.FAILED for report in obj.reports[-5:])
            # Reconciled at last: the work is served and the backoff ended.
            await obj.run_alarms()
            (sub,) = obj.submissions("t1")
            assert sub.state is SubmissionState.SETTLED
            assert read_state(obj.storage).retry is None
            return _gaps(times)

    gaps = asyncio.run(body())
    _assert_doubling(gaps)


def test_a_caught_up_pass_that_keeps_failing_backs_off(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """Outside native work too: a caught-up pass serving a lane that always has more to do,
    whose final decision storage keeps refusing, backs off instead of firing every 500 ms."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()

        async def busy(now: int, deadline: int) -> int | None:
            return now  # more work at once

        obj.space.lanes.register("host.lane", busy, dispatch_timeout_ms=1_000)
        obj.space.scheduler.gate.schedule("host.lane", clock.now_ms())
        failed: list[int] = []

        def refuse(location: str) -> None:
            failed.append(clock.now_ms())
            raise StorageError("disk I/O error")

        obj.failpoints.install(FINISH_BEFORE, refuse)
        for _ in range(4):
            await _fire_at_slot(obj)
        _assert_doubling(_gaps(failed))
        state = read_state(raw_storage)
        assert state.processed == state.dirty  # no native work was owed throughout
        assert state.retry is not None and state.retry.stalls == 4

        # The decision succeeds again: the lane is served at its own pace, the retry ended.
        obj.failpoints.clear(FINISH_BEFORE)
        await _fire_ok(obj)
        assert read_state(raw_storage).retry is None
        slot = raw_storage.known_alarm()
        assert slot == clock.now_ms() + MIN_DELAY

    run(body())


async def _fire_ok(obj: Obj) -> None:
    slot = obj.storage.known_alarm()
    assert slot is not None
    obj.clock.set(max(slot, obj.clock.now_ms()))
    report = await obj.fire()
    assert report.phase is PassPhase.CAUGHT_UP


def test_a_producer_in_flight_is_not_postponed_by_a_failure_before_the_begin(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """A producer whose body is still running when the pass fails before its begin: nothing
    is backed off, so the facts it is about to commit are served at the minimum delay."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", {"n": 1})
        gate = obj.space.scheduler.gate
        entered, finish = asyncio.Event(), asyncio.Event()

        async def producer() -> None:
            async with gate.mutation():
                entered.set()
                await finish.wait()

        task = asyncio.ensure_future(producer())
        await entered.wait()
        assert gate.active == 1
        _refuse_the_begin(obj)
        await _fire_at_slot(obj)
        assert read_state(raw_storage).retry is None
        native = obj.space.scheduler.due_queue.get(NATIVE)
        assert native is not None and native.due_at is not None
        assert native.due_at <= clock.now_ms() + MIN_DELAY
        slot = raw_storage.known_alarm()
        assert slot is not None and slot <= clock.now_ms() + MIN_DELAY
        finish.set()
        await task

    run(body())
