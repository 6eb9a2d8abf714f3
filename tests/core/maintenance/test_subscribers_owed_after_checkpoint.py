"""Records a pass appended and could not deliver yet stay owed through the pass's checkpoint:
an object lost after the checkpoint and before the pass's end (which sets the publication
lane) still has the lane due after its restart, so the subscriber gets them without any new
work arriving."""

from __future__ import annotations

import asyncio

from subscribers_support import Recorder, clock, emit, log_end, row, writer_app

from threadline.testing import SimulatedObject

CHECKPOINTED = "maintenance:checkpoint:after"


async def _lost_after_the_checkpoint() -> tuple[Recorder, set[str]]:
    app = writer_app()
    got = Recorder()
    # Unavailable at first: the records the pass appends are behind at its checkpoint.
    failures = [RuntimeError("sink unavailable")]
    got.fail = lambda batch: failures.pop() if failures else None
    app.subscriber("sink", kinds={"note"})(got)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        emit(obj, "a", ("note", 1), ("note", 2))
        obj.crash_at(CHECKPOINTED)
        await obj.run_alarms()
        assert obj.evictions == 1 and obj.crashes[0].fired
        assert obj.alarm_at is None
        stored = row(obj, "sink")
        # Past both notes; it may have stepped over the settlement record behind them too.
        assert stored is not None and log_end(obj, "note") <= stored.cursor <= log_end(obj)
        logged = {str(r["record_id"]) for r in obj.storage.exec(
            "SELECT record_id FROM tl_history WHERE kind = 'note'")}
        return got, logged


def test_records_undelivered_at_a_lost_passs_checkpoint_are_still_delivered() -> None:
    got, logged = asyncio.run(_lost_after_the_checkpoint())
    assert {record.record_id for record in got.records} == logged and len(logged) == 2
