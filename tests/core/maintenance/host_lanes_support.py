"""Helpers for the host-lane tests: a simulated object over a manual clock, and lane rows."""

from __future__ import annotations

from datetime import datetime

from threadline.clock import ManualClock, from_epoch_ms
from threadline.config import RuntimeConfig
from threadline.scheduling import Lane
from threadline.testing import SimulatedObject

START = 1_700_000_000_000
CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)


def at(ms: int) -> datetime:
    """Epoch milliseconds as an aware datetime."""
    return from_epoch_ms(ms)


def lane(obj: SimulatedObject, lane_id: str) -> Lane | None:
    """The lane's row as committed."""
    return obj.space.scheduler.due_queue.get(lane_id)


def clock() -> ManualClock:
    return ManualClock(START)
