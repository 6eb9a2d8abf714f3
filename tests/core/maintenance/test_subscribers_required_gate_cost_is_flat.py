"""The required gate costs the same on a young and an old Thread: whether a Thread may start is
decided from per-Thread positions and seeks, so the rows a turn reads do not grow with its log,
for a required subscriber declared with ``kinds``, and beside a parked required subscriber
holding another Thread. Prints the rows a turn's passes examine (SQLite's virtual-machine
steps, in units of 64: the local meter counts only the rows returned, the platform bills the
rows scanned) and return, at 1,000 and 10,000 records."""

from __future__ import annotations

import asyncio

from subscribers_support import CONFIG, Recorder, clock, emit, writer_app

from threadline import DeliveryRefused
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState

SIZES = (1_000, 10_000)


async def _rows_per_turn(records: int, *, parked_elsewhere: bool) -> tuple[int, int]:
    app = writer_app(CONFIG)
    app.subscriber("audit", kinds={"note"}, required=True)(Recorder())
    if parked_elsewhere:
        refusing = Recorder()
        refusing.fail = lambda batch: (DeliveryRefused("refused")
                                       if any(r.thread_id == "z" for r in batch) else None)
        app.subscriber("ledger", kinds={"alert"}, required=True)(refusing)
    async with SimulatedObject(app, clock=clock()) as obj:
        if parked_elsewhere:
            emit(obj, "z", ("alert", 0))
        written = 0
        while written < records:
            # Records the subscriber does not want, and now and then one it does.
            items = [("chatter", i) for i in range(min(500, records - written) - 1)]
            emit(obj, "t", *items, ("note", written))
            written += len(items) + 2  # its records and its settlement record
            await obj.run_alarms()
        storage = obj.storage
        # The rows SQLite examines, as SqliteStorage(count_vm_steps=True) counts them.
        storage._conn.set_progress_handler(storage._count_step, 64)
        turn = emit(obj, "t")
        before, steps = len(obj.reports), storage.vm_steps
        await obj.run_alarms()
        assert obj.submission(turn).state is SubmissionState.SETTLED
        returned = sum(report.rows_read for report in obj.reports[before:])
        return storage.vm_steps - steps, returned


def _figures(parked_elsewhere: bool) -> dict[int, tuple[int, int]]:
    return {size: asyncio.run(_rows_per_turn(size, parked_elsewhere=parked_elsewhere))
            for size in SIZES}


def test_a_turn_reads_as_many_rows_at_10000_records_as_at_1000_with_a_kinds_subscriber(
) -> None:
    rows = _figures(parked_elsewhere=False)
    print(f"\nper turn (vm steps, rows returned), required subscriber with kinds: {rows}")
    _assert_flat(rows)


def test_a_turn_reads_as_many_rows_at_10000_records_beside_a_parked_required_subscriber(
) -> None:
    rows = _figures(parked_elsewhere=True)
    print(f"\nper turn (vm steps, rows returned) beside a parked required subscriber: {rows}")
    _assert_flat(rows)


def _assert_flat(rows: dict[int, tuple[int, int]]) -> None:
    (small_steps, small_rows), (large_steps, large_rows) = rows[SIZES[0]], rows[SIZES[1]]
    # A B-tree one level deeper costs a few steps more, never a scan of the log.
    assert large_steps <= small_steps * 1.25 + 256, rows
    assert large_rows <= small_rows + 2, rows
