"""One maintenance pass per alarm event.

For now the pass only ends the way every pass must: with an explicit alarm decision derived
from the durable due queue (re-armed at the earliest due lane, never earlier than the minimum
delay, or cleared). Lane work is driven here as the scheduling and thread layers land.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threadline.space import Space

_EARLIEST_DUE = "SELECT due_at FROM tl_lanes WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1"


async def run_pass(space: Space) -> None:
    """Run one pass and leave the alarm slot consistent with the due queue."""
    storage = space.storage
    now = space.clock.now_ms()
    min_delay = space.app.config.min_alarm_delay_ms

    def decide() -> None:
        due = storage.exec(_EARLIEST_DUE).scalar()
        if due is None:
            storage.delete_alarm()
        else:
            storage.set_alarm(max(int(due), now + min_delay))

    storage.transaction(decide)


__all__ = ["run_pass"]
