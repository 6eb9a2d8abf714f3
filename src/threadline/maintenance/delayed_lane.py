"""The ``threadline:delayed`` lane: delayed submissions take their place as they fall due.

A delayed submission waits in ``tl_delayed`` with its due time on this lane. A wave admits
every submission due, in batches of :data:`ADMIT_BATCH`, each batch one transaction (the moves
into the FIFO, the native lane's enrollment, the generation, the alarm and the wave's
progress). A batch reads the earliest rows of the due index, one more than it may admit: the
first of them not due yet is when the lane is next due. So the wave that admits one due
submission reads the same rows with ten or ten thousand others pending. Each batch reports
the wave's progress, whether it admitted anything or found nothing due (the earliest row was
aborted after the lane took its due time): either way the wave did all there was to do, so
only a batch that fails counts toward parking, and a lane whose deadlines keep vanishing
never parks a live submission behind the hourly retry. A wave that reaches its deadline with
submissions still due returns the current time, and the lane is due again at once (after the
pass's minimum delay).

The wave runs beside native work; the Attempts of what it admits run in the next pass (a
pass dispatches what it found when it began, and what producers admit while its native work
runs). Delivery is exactly once: a submission is admitted by the transaction that removes it
from ``tl_delayed``, so a wave lost with the object admits nothing twice, and what it had not
admitted yet is still due when the lane's crash fallback brings it back.
"""

from __future__ import annotations

from threadline.clock import Clock
from threadline.maintenance.lane_wave import current_wave
from threadline.scheduling.failpoints import Failpoints
from threadline.threads.ledger import Ledger

#: Delayed submissions admitted per transaction.
ADMIT_BATCH = 100
#: Bound of one wave of the delayed lane.
DELAYED_DISPATCH_TIMEOUT_MS = 30_000
#: Reached after each committed batch of admissions.
ADMITTED = "maintenance:delayed:admitted"


class DelayedAdmissions:
    """The handler of the ``threadline:delayed`` lane, over one incarnation's ledger."""

    def __init__(
        self, ledger: Ledger, clock: Clock, failpoints: Failpoints, *, batch: int = ADMIT_BATCH
    ) -> None:
        if batch < 1:
            raise ValueError("a batch admits at least one submission")
        self._ledger = ledger
        self._clock = clock
        self._failpoints = failpoints
        self._batch = batch

    async def run_lane(self, now: int, deadline: int) -> int | None:
        """Admit every delayed submission due; return when the next one falls due (None:
        none waits), or now when ``deadline`` came first with some still due."""
        del now  # the claim's time: each batch admits what is due when it starts
        wave = current_wave()
        progress = None if wave is None else wave.progress
        while True:
            at = self._clock.now_ms()
            if at >= deadline:
                return at
            batch = self._ledger.admit_due(at, self._batch, also=progress)
            if batch.admitted:
                await self._failpoints.reached(ADMITTED)
            if not batch.more:
                return batch.next_due
            # A full batch: a turn for native work and the other waves before the next one.
            await self._clock.sleep_until(at)


__all__ = ["ADMITTED", "ADMIT_BATCH", "DELAYED_DISPATCH_TIMEOUT_MS", "DelayedAdmissions"]
