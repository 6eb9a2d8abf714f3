"""Storage cost of the producer path and of ``next()``, from the meter.

``SqliteStorage``'s meter is approximate (an upsert counts as one row written and none read;
index updates are not counted), so these pin the statement shape, not billed figures.
"""

from __future__ import annotations

from collections.abc import Callable

from threadline.scheduling import Scheduler
from threadline.storage import MeterReading, SqliteStorage


def _cost(storage: SqliteStorage, fn: Callable[[], object]) -> MeterReading:
    before = storage.meter.reading()
    fn()
    return storage.meter.reading() - before


def _shape(cost: MeterReading) -> tuple[int, int, int, int]:
    return cost.statements, cost.rows_read, cost.rows_written, cost.alarm_writes


def test_mutate_one_host_lane(sched: Scheduler, storage: SqliteStorage) -> None:
    def one() -> None:
        sched.gate.mutate(lambda: None, lanes=["mail"], invalidates_recovery=False)

    # Enroll (upsert, one row written) + next() (one indexed row read) + the alarm write.
    assert _shape(_cost(storage, one)) == (2, 1, 1, 1)
    # Later mutations keep the earlier alarm: no slot write.
    assert _shape(_cost(storage, one)) == (2, 1, 1, 0)


def test_mutate_native(sched: Scheduler, storage: SqliteStorage) -> None:
    def native() -> None:
        sched.gate.mutate(lambda: None)

    # Enroll native + bump the generation row (read 1, written 1) + next().
    assert _shape(_cost(storage, native)) == (3, 2, 2, 1)
    assert _shape(_cost(storage, lambda: sched.gate.mutate(lambda: None, lanes=["mail"]))) == (
        4, 2, 3, 0)


def test_mutate_without_work_costs_nothing(sched: Scheduler, storage: SqliteStorage) -> None:
    assert _shape(_cost(storage, lambda: sched.gate.mutate(
        lambda: None, invalidates_recovery=False))) == (0, 0, 0, 0)


def test_next_is_one_row(sched: Scheduler, storage: SqliteStorage) -> None:
    for index in range(50):
        sched.due_queue.enroll(f"lane-{index}", 1_000 + index)
    assert _shape(_cost(storage, sched.due_queue.next)) == (1, 1, 0, 0)
