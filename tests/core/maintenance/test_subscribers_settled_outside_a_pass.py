"""A settlement record appended outside a pass, with no native work to go with it, reaches the
subscribers: aborting a delayed submission before it falls due settles it at once, and its
``submission.settled`` record makes the publication lane due (the alarm invariant checker
holds after every commit)."""

from __future__ import annotations

import asyncio

from subscribers_support import Recorder, clock, log_end, row, writer_app

from threadline.scheduling import PUBLICATION
from threadline.testing import SimulatedObject
from threadline.threads.records import SUBMISSION_SETTLED


async def _abort_delayed() -> None:
    app = writer_app()
    got = Recorder()
    app.on_settled(name="settled")(got)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        later = obj.admit("t", "writer", {"emit": []}, not_before=obj.clock.now_ms() + 60_000)
        obj.abort(later.id)
        lane = obj.space.scheduler.due_queue.get(PUBLICATION)
        assert lane is not None and lane.due_at is not None
        await obj.run_alarms(until=obj.clock.now_ms() + 5_000)
        assert [(r.kind, r.submission_id, r.body["outcome"]) for r in got.records] == [
            (SUBMISSION_SETTLED, later.id, "aborted")]
        stored = row(obj, "settled")
        assert stored is not None and stored.cursor == log_end(obj) == 1
        # Delivered long before the time it was due at, when the delayed lane looks again.
        await obj.run_alarms()
        assert len(got.records) == 1 and obj.alarm_at is None


def test_a_delayed_submission_aborted_before_it_falls_due_reaches_subscribers() -> None:
    asyncio.run(_abort_delayed())
