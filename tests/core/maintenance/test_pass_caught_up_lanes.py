"""A caught-up pass reads the lanes once, and never decides the alarm from a stale read."""

from __future__ import annotations

import asyncio

from pass_support import CONFIG, Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.storage import SqliteStorage
from threadline.threads.model import SubmissionState

HOUR_MS = 3_600_000


def test_caught_up_pass_with_no_lane_due_reads_the_earliest_lane_only(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        later = clock.now_ms() + HOUR_MS
        obj.space.scheduler.gate.schedule("report", later)
        raw_storage.set_alarm(clock.now_ms())  # an early alarm
        statements: list[str] = []
        original = raw_storage.exec

        def logged(sql: str, *params: object) -> object:
            statements.append(sql)
            return original(sql, *params)  # type: ignore[arg-type]

        raw_storage.exec = logged  # type: ignore[method-assign,assignment]
        report = await obj.fire()
        raw_storage.exec = original  # type: ignore[method-assign]
        assert report.phase is PassPhase.CAUGHT_UP
        reads = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]
        assert reads == ["SELECT due_at FROM tl_lanes WHERE due_at IS NOT NULL"
                         " ORDER BY due_at LIMIT 1"], reads
        assert report.rows_read <= 1
        assert raw_storage.known_alarm() == later

    run(body())


def test_caught_up_pass_decides_from_the_queue_when_a_producer_commits_meanwhile(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.space.scheduler.gate.schedule("report", clock.now_ms() + HOUR_MS)
        raw_storage.set_alarm(clock.now_ms())
        finish = obj.failpoints.block_at("maintenance:finish:before")
        pending = asyncio.ensure_future(obj.fire())
        await asyncio.wait_for(finish.arrived.wait(), 1)
        sub = obj.admit("t", {"n": 1})
        finish.release()
        report = await pending
        assert report.phase is PassPhase.CAUGHT_UP
        # The admission's lane is due now: the decision keeps the alarm at the earliest
        # a pass may run, not at the hour-later lane the begin read.
        alarm = raw_storage.known_alarm()
        assert alarm is not None and alarm <= clock.now_ms() + CONFIG.min_alarm_delay_ms
        clock.set(alarm)
        await obj.fire()
        assert obj.get(sub.id).state is SubmissionState.SETTLED

    run(body())


def test_caught_up_pass_owing_no_alarm_writes_nothing(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """The firing emptied the slot: with nothing due, no delete is owed (one row read, no
    write, no alarm call)."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        raw_storage.set_alarm(clock.now_ms())  # a stale alarm: nothing is due
        before = obj.cost()
        report = await obj.fire()
        cost = obj.cost() - before
        assert report.phase is PassPhase.CAUGHT_UP
        assert (cost.statements, cost.rows_written, cost.alarm_writes) == (1, 0, 0)
        assert raw_storage.known_alarm() is None

    run(body())


def test_caught_up_pass_leaves_a_slot_that_already_holds_the_earliest_due_alone(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """A producer that armed the slot during the pass at the very bound the pass decides
    spares the decision its write."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        later = clock.now_ms() + HOUR_MS
        obj.space.scheduler.gate.schedule("report", later)
        raw_storage.set_alarm(clock.now_ms())
        finish = obj.failpoints.block_at("maintenance:finish:before")
        pending = asyncio.ensure_future(obj.fire())
        await asyncio.wait_for(finish.arrived.wait(), 1)
        raw_storage.set_alarm(later)
        before = obj.cost()
        finish.release()
        report = await pending
        assert report.phase is PassPhase.CAUGHT_UP
        assert (obj.cost() - before).alarm_writes == 0
        assert raw_storage.known_alarm() == later

    run(body())
