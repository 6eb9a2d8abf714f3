"""The round-robin cursors are stored only when some Thread waits behind the chosen ones:
serving or recovering every Thread that needs it writes no cursor row."""

from __future__ import annotations

from pass_support import Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.scheduling import read_state
from threadline.storage import SqliteStorage
from threadline.threads.model import SubmissionState


def test_a_lone_runnable_thread_is_served_without_storing_the_cursor(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        first = obj.admit("solo", {})
        second = obj.admit("solo", {})
        reports = await obj.run()
        assert [obj.get(s.id).state for s in (first, second)] == [SubmissionState.SETTLED] * 2
        assert sum(r.dispatched for r in reports) == 2
        assert read_state(raw_storage).last_served_thread is None

    run(body())


def test_a_lone_thread_to_recover_is_recovered_without_storing_the_cursor(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        sub = obj.admit("solo", {})
        # Its Attempt was in flight when an earlier incarnation was lost.
        raw_storage.exec(
            "UPDATE tl_submissions SET state = 'running', attempts = 1, revision = revision + 1,"
            " lease_owner = 'inc_old/lease_1', lease_expires_at = ?", clock.now_ms() + 60_000)
        await obj.evict()
        clock.advance(1_000)
        reports = await obj.run()
        assert sum(r.recovered for r in reports) >= 1
        assert obj.get(sub.id).state is SubmissionState.SETTLED
        assert read_state(raw_storage).last_recovered_thread is None

    run(body())


def test_two_threads_to_recover_store_the_cursor_at_each(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        subs = [obj.admit(thread, {}) for thread in ("a", "b")]
        # Both Attempts were in flight when an earlier incarnation was lost.
        raw_storage.exec(
            "UPDATE tl_submissions SET state = 'running', attempts = 1, revision = revision + 1,"
            " lease_owner = 'inc_old/lease_1', lease_expires_at = ?", clock.now_ms() + 60_000)
        await obj.evict()
        clock.advance(1_000)
        reports = await obj.run()
        assert sum(r.recovered for r in reports) >= 2
        assert all(obj.get(s.id).state is SubmissionState.SETTLED for s in subs)
        # The other Thread waited behind each: the front is durable, so an eviction mid-way
        # restarts after the last one recovered.
        assert read_state(raw_storage).last_recovered_thread == "b"

    run(body())
