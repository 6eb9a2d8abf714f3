"""The ``threadline:delayed`` lane takes the due time of its earliest submission; when that one
is aborted before it falls due, the wave that wakes for it finds nothing due. That wave did all
there was to do: it is not a stall. However many deadlines vanish this way, the lane never
parks, so a live submission behind them is admitted at its time, not up to an hour late."""

from __future__ import annotations

import asyncio

from delayed_support import MINUTE, START, Ran, settled, simulated

from threadline.scheduling.due_queue import DELAYED, LaneState


async def _run() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        parks = obj.app.config.park_after_stalls
        doomed = [obj.admit("t", "echo", f"doomed-{i}", not_before=START + (i + 1) * MINUTE)
                  for i in range(parks)]
        kept_due = START + parks * MINUTE + 30_000
        kept = obj.admit("t", "echo", "kept", not_before=kept_due)
        for i, submission in enumerate(doomed):
            # The lane has taken this one's due time; it is aborted just before it.
            await obj.run_alarms(until=START + (i + 1) * MINUTE - 1)
            lane = obj.space.scheduler.due_queue.get(DELAYED)
            assert lane is not None and lane.due_at == START + (i + 1) * MINUTE
            obj.abort(submission.id, "cancelled")
        await obj.run_alarms(until=kept_due + MINUTE)
        lane = obj.space.scheduler.due_queue.get(DELAYED)
        assert lane is not None and lane.state is not LaneState.PARKED and lane.stalls == 0
        assert kept_due <= ran.at("kept") < kept_due + MINUTE
        settled(obj, kept.id)
        assert ran.inputs() == ["kept"]


def test_waves_finding_only_aborted_deadlines_never_park_the_lane_nor_delay_a_live_submission(
) -> None:
    asyncio.run(_run())
