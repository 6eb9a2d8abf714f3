"""Every pass returns a PassReport; an incarnation keeps the last 50 in memory, failed ones are
also stored (the last 50), and the readout lists actionable and failed ones. ``Space.start``
re-arms owed work on restart, reading O(1) rows."""

from __future__ import annotations

from pass_support import Obj, echo_app, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import StorageError
from threadline.maintenance import PassPhase
from threadline.maintenance.host_lanes import LaneContext
from threadline.maintenance.report import KEPT_REPORTS
from threadline.storage import SqliteStorage


def test_pass_reports_are_listed_from_memory_and_only_failed_ones_stored(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()  # the new object's first pass is actionable (it classifies)
        reports = obj.space.maintenance.reports
        for n in range(KEPT_REPORTS + 5):
            obj.admit(f"t{n}", {"n": n})
            await obj.run()
        # An actionable pass stores no report: a unit of work costs no row for it.
        assert reports.stored() == []
        async def idle(now: int, deadline: int) -> int | None:
            return None

        obj.space.lanes.register("probe.lane", idle, dispatch_timeout_ms=1_000)
        for _ in range(3):
            obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())
            clock.advance(1_000)
            assert (await obj.fire()).phase is PassPhase.CAUGHT_UP
        assert reports.caught_up == 3
        obj.admit("x", {"secret": "payload"})
        ledger = obj.space.runtime.ledger

        def fail() -> object:
            raise StorageError("disk full")

        ledger.live_threads = fail  # type: ignore[method-assign]
        clock.advance(1_000)
        failed = await obj.fire()
        assert reports.stored() == [failed]
        assert failed.phase is PassPhase.FAILED and failed.failure_type == "StorageError"
        listed = reports.listed()
        assert len(listed) == KEPT_REPORTS
        assert listed[0] == failed
        assert all(r.phase is not PassPhase.CAUGHT_UP for r in listed)
        actionable = listed[1]
        assert actionable.phase is PassPhase.ACTIONABLE
        assert (actionable.settled, actionable.dispatched, actionable.nonterminal) == (1, 1, 0)
        assert actionable.rows_read > 0 and actionable.rows_written > 0
        assert actionable.statements > 0
        assert "payload" not in repr(listed)
        # A new incarnation still lists the failed pass, once, and nothing it did not store.
        await obj.evict()
        assert obj.space.maintenance.reports.listed() == [failed]
        ledger = obj.space.runtime.ledger
        ledger.live_threads = fail  # type: ignore[method-assign]
        clock.advance(10_000)
        again = await obj.fire()
        assert again.phase is PassPhase.FAILED
        assert obj.space.maintenance.reports.listed() == [again, failed]

    run(body())


def test_pass_start_rearms_owed_work_after_a_restart(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        sub = obj.admit("t", {})
        raw_storage.take_due_alarm(clock.now_ms() + 10_000_000)  # the slot is lost
        assert raw_storage.known_alarm() is None
        before = obj.cost()
        await obj.evict()
        cost = obj.cost() - before
        assert raw_storage.known_alarm() is not None
        assert cost.rows_read <= 8  # O(1): the ledger is not read
        await obj.run()
        assert obj.get(sub.id).outcome is not None

    run(body())


def test_pass_start_reads_the_same_rows_however_much_work_is_owed(clock: ManualClock) -> None:
    def start_cost(submissions: int) -> tuple[int, int]:
        storage = SqliteStorage(":memory:")

        async def body() -> tuple[int, int]:
            obj = Obj(storage, clock, echo_app)
            await obj.start()
            for n in range(submissions):
                obj.admit(f"t{n}", {"n": n})
            before = obj.cost()
            await obj.evict()
            cost = obj.cost() - before
            return cost.rows_read, cost.statements

        try:
            return run(body())  # type: ignore[no-any-return]
        finally:
            storage.close()

    assert start_cost(1) == start_cost(200)


def test_pass_start_reports_a_parked_lane_left_unreported(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    def make() -> Application:
        app = echo_app()

        @app.lane("host.sync")
        async def sync(ctx: LaneContext) -> None:
            return None

        return app

    async def body() -> None:
        obj = Obj(raw_storage, clock, make)
        await obj.start()
        # Parked by a claim whose incarnation was lost before it could report it.
        raw_storage.exec(
            "INSERT INTO tl_lanes (id, due_at, not_before, stalls, state, reported)"
            " VALUES ('host.sync', ?, ?, 12, 'parked', 0)",
            clock.now_ms() + 3_600_000, clock.now_ms() + 3_600_000)
        await obj.evict()
        assert [line for line in obj.logs if "'host.sync' is parked" in line] != []
        await obj.evict()
        assert len([line for line in obj.logs if "'host.sync' is parked" in line]) == 1

    run(body())
