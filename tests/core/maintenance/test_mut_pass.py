"""Maintenance-pass details that the behaviour tests reach only on their common path."""

from __future__ import annotations

from pass_support import CONFIG, Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import StorageError
from threadline.maintenance import PassPhase
from threadline.maintenance.maintenance import FINISH_BEFORE
from threadline.scheduling import NATIVE, NativeRetry, read_state
from threadline.scheduling import state as gen
from threadline.storage import SqliteStorage


def test_a_failed_pass_never_shortens_the_backoff_already_pending(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", "hello")
        dirty = read_state(raw_storage).dirty
        far = clock.now_ms() + 10 * CONFIG.alarm_backoff_cap_ms
        raw_storage.transaction(
            lambda: gen.set_retry(raw_storage, NativeRetry(dirty, far, True, 3)))
        # The native lane is due now for another reason (a timer, say): the pass is actionable
        # although the generation's own retry is still far ahead.
        obj.space.scheduler.gate.schedule(NATIVE, clock.now_ms())

        def broken() -> object:
            raise StorageError("disk I/O error")

        obj.space.runtime.ledger.scan_nonterminal = broken  # type: ignore[assignment,method-assign]
        report = await obj.fire()
        assert report.phase is PassPhase.FAILED
        retry = read_state(raw_storage).pending_retry
        assert retry is not None and retry.stalls == 4
        assert retry.not_before == far
        assert retry.native_only

    run(body())


def _break_scan(obj: Obj) -> None:
    def broken() -> object:
        raise StorageError("disk I/O error")

    obj.space.runtime.ledger.scan_nonterminal = broken  # type: ignore[assignment,method-assign]


def test_a_failure_backs_a_new_generation_off_afresh(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """A retry left from an older generation is obsolete: its stalls and time do not carry."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", "hello")
        dirty = read_state(raw_storage).dirty
        far = clock.now_ms() + 10 * CONFIG.alarm_backoff_cap_ms
        raw_storage.transaction(
            lambda: gen.set_retry(raw_storage, NativeRetry(dirty - 1, far, True, 6)))
        _break_scan(obj)
        assert (await obj.fire()).phase is PassPhase.FAILED
        retry = read_state(raw_storage).pending_retry
        assert retry is not None and (retry.generation, retry.stalls) == (dirty, 1)
        base = CONFIG.alarm_backoff_base_ms
        assert clock.now_ms() + base // 2 <= retry.not_before <= clock.now_ms() + base

    run(body())


def test_a_caught_up_pass_that_fails_owes_no_native_retry(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """Only an actionable pass has a generation to back off; a caught-up one leaves the
    generation acknowledged and the slot empty."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        obj.admit("t1", "hello")
        await obj.run()
        dirty, processed = obj.generation()
        assert dirty == processed

        def refuse(location: str) -> None:
            raise StorageError("disk I/O error")

        obj.failpoints.install(FINISH_BEFORE, refuse)
        report = await obj.fire()
        assert report.phase is PassPhase.FAILED
        state = read_state(raw_storage)
        assert state.retry is None and (state.dirty, state.processed) == (dirty, processed)
        native = obj.space.scheduler.due_queue.get(NATIVE)
        assert native is None or native.due_at is None
        assert raw_storage.known_alarm() is None

    run(body())


SHORT = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000,
                      event_deadline_ms=100_000, yield_after_ms=50_000)


def test_a_lane_wave_never_outlives_the_event_deadline(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, lambda: echo_app(SHORT))
        await obj.start()
        await obj.run()
        seen: list[tuple[int, int]] = []

        async def handler(now: int, deadline: int) -> int | None:
            seen.append((now, deadline))
            return None

        obj.space.lanes.register("probe.lane", handler, dispatch_timeout_ms=300_000)
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())
        started = clock.now_ms()
        await obj.fire()
        assert seen == [(started, started + SHORT.event_deadline_ms)]

    run(body())


def test_a_lane_gets_one_wave_per_pass_even_if_still_due(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        calls: list[int] = []

        async def busy(now: int, deadline: int) -> int | None:
            calls.append(now)
            return now  # more to do at once

        obj.space.lanes.register("probe.lane", busy, dispatch_timeout_ms=1_000)
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())
        obj.admit("t1", "hello")  # an actionable pass also serves lanes that became due
        report = await obj.fire()
        assert report.phase is PassPhase.ACTIONABLE
        assert len(calls) == 1

    run(body())
