"""One maintenance pass per alarm event.

For now the pass only ends the way every pass must: with an explicit alarm decision derived
from the durable due queue (re-armed at the earliest due lane, never earlier than the minimum
delay, or cleared). Lane work is driven here as the thread layer is wired to the pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadline.scheduling import AlarmDecision

if TYPE_CHECKING:
    from threadline.space import Space


async def run_pass(space: Space) -> AlarmDecision:
    """Run one pass and leave the alarm slot consistent with the due queue."""
    alarm = space.scheduler.alarm
    with alarm.wakes_deferred():
        return alarm.decide(space.clock.now_ms())


__all__ = ["run_pass"]
