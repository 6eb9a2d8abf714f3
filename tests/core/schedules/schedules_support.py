"""Helpers for the schedule tests: an application with schedules, a simulated object over a
manual clock, and what a schedule's row and lane hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from threadline import Application, RuntimeConfig, ScheduleContext, Turn
from threadline.clock import ManualClock
from threadline.maintenance.schedule_lanes import ScheduleRow
from threadline.scheduling import Lane
from threadline.testing import SimulatedObject

#: 2023-11-14 22:13:20 UTC.
START = 1_700_000_000_000
MINUTE = 60_000
HOUR = 3_600_000
DAY = 86_400_000
CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=60_000)


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    """Epoch milliseconds of a UTC wall-clock time."""
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()) * 1000


@dataclass
class Runs:
    """What the schedules' functions saw, across incarnations: one entry per call."""

    fires: list[tuple[str, int]] = field(default_factory=list)
    #: (schedule, fire time, when the call started, when it returned) of each call.
    calls: list[tuple[str, int, int, int | None]] = field(default_factory=list)

    def of(self, schedule_id: str) -> list[int]:
        """The fire times ``schedule_id``'s function was called with, in order."""
        return [fire for name, fire in self.fires if name == schedule_id]


def fire_ms(ctx: ScheduleContext) -> int:
    """The fire time of ``ctx`` in epoch milliseconds, from its datetime."""
    return int(ctx.fire_time.timestamp() * 1000)


def app_with_echo(config: RuntimeConfig = CONFIG) -> Application:
    """An application with one agent, ``echo``, that returns its input."""
    app = Application(config)

    @app.agent("echo")
    async def echo(turn: Turn) -> object:
        return await turn.step("echo", lambda: turn.input)

    return app


def row(obj: SimulatedObject, schedule_id: str) -> ScheduleRow | None:
    """The schedule's row as committed."""
    found = [item for item in obj.space.schedules.rows() if item.id == schedule_id]
    return found[0] if found else None


def lane(obj: SimulatedObject, schedule_id: str) -> Lane | None:
    """The schedule's lane row."""
    return obj.space.scheduler.due_queue.get(schedule_id)


def clock(at: int = START) -> ManualClock:
    return ManualClock(at)


_COMPLETIONS = (
    "CREATE TABLE IF NOT EXISTS test_completions (schedule_id TEXT, fire INTEGER)",
    "CREATE TRIGGER IF NOT EXISTS test_completion_log AFTER UPDATE OF pending_fire"
    " ON tl_schedules WHEN OLD.pending_fire IS NOT NULL AND NEW.pending_fire IS NULL"
    " BEGIN INSERT INTO test_completions VALUES (OLD.id, OLD.pending_fire); END",
)


def log_completions(obj: SimulatedObject) -> None:
    """Log every committed completion of a fire (its pending fire cleared), in the database
    itself: a completion rolled back is not logged, and the log survives the object's loss."""
    for statement in _COMPLETIONS:
        obj.storage.exec(statement)


def completions(obj: SimulatedObject) -> list[tuple[str, int]]:
    """Every committed completion, in order."""
    rows = obj.storage.exec("SELECT schedule_id, fire FROM test_completions ORDER BY rowid")
    return [(str(item["schedule_id"]), int(item["fire"])) for item in rows]
