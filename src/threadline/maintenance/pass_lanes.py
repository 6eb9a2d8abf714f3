"""The lane waves of a maintenance pass: the non-native lanes it serves around native work.

:func:`serve_lane` runs one bounded wave of a lane (those due at the begin run beside native
work), :func:`second_round` gives the lanes enrolled or held meanwhile a wave once native work
is done, and :func:`serve_after_native` the after-native lanes once every Attempt has joined.
The waves themselves are :class:`~threadline.maintenance.lanes.LaneRunner`'s.
"""

from __future__ import annotations

import asyncio

from threadline.maintenance.lanes import WaveResult
from threadline.maintenance.pass_context import PassContext
from threadline.maintenance.pass_state import _Observed, _Tally
from threadline.scheduling import Lane


async def serve_lane(
    ctx: PassContext, lane: Lane, until: int, tally: _Tally, *, selected_at: int | None = None
) -> WaveResult:
    """Run one wave of ``lane`` (``selected_at``: when the begin found it due)."""
    # A wave woken late in the pass whose allowance no longer fits is not started (the
    # lane stays due for the next event, uncharged): see LaneRunner.run_wave.
    tally.waves.add(lane.id)
    await ctx._pause()
    result = await ctx._lanes.run_wave(lane, until=until, selected_at=selected_at)
    if result.newly_parked:
        tally.parked_lanes = True
    return result


async def second_round(
    ctx: PassContext, observed: _Observed, due: list[Lane], enrollments: int, until: int,
    tally: _Tally,
) -> None:
    """Give every lane now due a wave it has not had, if an actionable pass needs a second
    round: ``enrollments`` and ``due`` are the queue's enrollment count and lanes at the begin."""
    if observed.actionable and (
            ctx._queue.lane_enrollments != enrollments
            or any(lane.id not in tally.waves for lane in ctx._lanes.concurrent(due))):
        # Lanes enrolled meanwhile (recovery events of this pass, say), or due at the
        # begin but held by a mutation then. One that merely fell due by the clock
        # meanwhile is left to the final decision's alarm.
        now = ctx._clock.now_ms()
        later = [lane for lane in ctx._lanes.due(ctx._queue.due(now), now)
                 if lane.id not in tally.waves]
        await asyncio.gather(*(serve_lane(ctx, lane, until, tally) for lane in later))


async def serve_after_native(
    ctx: PassContext, snapshot: list[Lane] | None, until: int, tally: _Tally
) -> None:
    """One wave for each due after-native lane (see :meth:`LaneRunner.run_after_native`).

    ``snapshot`` is the begin's read when no lane was enrolled since: no second read then
    (a lane that merely fell due by the clock meanwhile is left to the final decision's
    alarm, as for the second round).
    """
    for result in await ctx._lanes.run_after_native(
            until, snapshot=snapshot, exclude=frozenset(tally.waves)):
        tally.waves.add(result.lane_id)
        if result.newly_parked:
            tally.parked_lanes = True
