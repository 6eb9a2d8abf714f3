"""Delivery is at least once: the object lost after a batch was handed over but before its
cursor was written delivers that batch again, whole and in order, after the restart; lost
before the hand-over, nothing is skipped."""

from __future__ import annotations

import asyncio

import pytest
from subscribers_support import Recorder, clock, emit, log_end, row, writer_app

from threadline.maintenance.publication_lane import DELIVERED, DELIVERING
from threadline.testing import SimulatedObject


async def _crash(location: str) -> tuple[Recorder, set[str]]:
    app = writer_app()
    got = Recorder()
    # The emitted records: the batches of two this test crashes between.
    app.subscriber("sink", kinds={"note"}, batch=2)(got)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        emit(obj, "a", ("note", 1), ("note", 2), ("note", 3))
        emit(obj, "b", ("note", 4))
        obj.crash_at(location, occurrence=2)
        await obj.run_alarms()
        assert obj.evictions == 1 and obj.alarm_at is None
        stored = row(obj, "sink")
        assert stored is not None and stored.cursor == log_end(obj, "note") == 4
        logged = {str(r["record_id"]) for r in obj.storage.exec(
            "SELECT record_id FROM tl_history WHERE kind = 'note'")}
        return got, logged


@pytest.mark.parametrize("location", [DELIVERING, DELIVERED])
def test_a_batch_lost_with_the_object_is_delivered_again(location: str) -> None:
    got, logged = asyncio.run(_crash(location))
    # Every record at least once, each Thread's in order, nothing out of order after a repeat.
    assert {record.record_id for record in got.records} == logged and len(logged) == 4
    per_thread = got.per_thread()
    assert sorted(set(per_thread["a"])) == [1, 2, 3] and set(per_thread["b"]) == {1}
    for seqs in per_thread.values():
        firsts = [seq for n, seq in enumerate(seqs) if seq not in seqs[:n]]
        assert firsts == sorted(firsts)
    if location == DELIVERED:
        # The second batch had been handed over when the object was lost: it came again.
        assert len(got.batches) == 3 and got.batches[1] == got.batches[2]
    else:
        assert len(got.batches) == 2
