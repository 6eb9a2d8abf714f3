"""Helpers for the recovery-fault and binding-wait tests: one object rebuilt over one file."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import Evicted
from threadline.maintenance.bindings import BindingWaits
from threadline.maintenance.faults import (
    RecoveryEvent,
    RecoveryEventHook,
    RecoveryEvents,
    RecoveryFaults,
)
from threadline.scheduling import RECOVERY_EVENTS, Scheduler, build_scheduler, read_state
from threadline.scheduling import state as gen
from threadline.storage import SqliteStorage, migrate
from threadline.storage.port import Rows, SqlValue

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)


class CrashingStorage(SqliteStorage):
    """SQLite that loses the object (raises :class:`Evicted`) at its ``crash_at``-th statement."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.statements = 0
        self.crash_at: int | None = None

    def exec(self, sql: str, *params: SqlValue) -> Rows:
        self.statements += 1
        if self.crash_at is not None and self.statements == self.crash_at:
            raise Evicted(f"statement {self.statements}")
        return super().exec(sql, *params)


@dataclass
class Rig:
    """One incarnation: storage, scheduler and the fault/event/binding services over them."""

    storage: SqliteStorage
    clock: ManualClock
    sched: Scheduler
    faults: RecoveryFaults
    events: RecoveryEvents
    bindings: BindingWaits
    logs: list[str] = field(default_factory=list)


def build(
    storage: SqliteStorage, clock: ManualClock, hook: RecoveryEventHook | None = None
) -> Rig:
    """Wire a fresh incarnation over ``storage`` (migrated here) like ``Space`` does."""
    migrate(storage)
    sched = build_scheduler(storage, clock, CONFIG, random.Random(3))
    logs: list[str] = []
    return Rig(
        storage=storage,
        clock=clock,
        sched=sched,
        faults=RecoveryFaults(storage, sched.gate, clock, log=logs.append),
        events=RecoveryEvents(storage, clock, hook, log=logs.append),
        bindings=BindingWaits(storage, sched.gate, clock, log=logs.append),
        logs=logs,
    )


class Recorder:
    """A hook that records what it was given and can be told to fail."""

    def __init__(self) -> None:
        self.seen: list[RecoveryEvent] = []
        self.fail_on: set[int] = set()

    async def __call__(self, event: RecoveryEvent) -> None:
        self.seen.append(event)
        if event.seq in self.fail_on:
            raise RuntimeError(f"host outbox refused event {event.seq}")


def end_pass(rig: Rig, *, acknowledge: bool = False) -> None:
    """What a quiescent pass leaves: events delivered and their lane idle, native due only for
    a fault retry, the generation acknowledged if asked, and the slot decided."""
    asyncio.run(rig.events.run_lane(rig.clock.now_ms(), 10**15))
    queue = rig.sched.due_queue
    lane = queue.get(RECOVERY_EVENTS)
    if lane is not None and lane.due_at is not None:
        claimed = queue.claim(lane, rig.clock.now_ms())
        assert claimed is not None and queue.complete(claimed, None)
    if acknowledge:
        gen.acknowledge(rig.storage, read_state(rig.storage).dirty)
    queue.checkpoint_native(rig.faults.next_retry_at())
    rig.sched.alarm.decide(rig.clock.now_ms())


def alarm_covers_due_lanes(rig: Rig) -> bool:
    """The alarm invariant: when a lane is due the slot fires no later than it may."""
    earliest = rig.sched.due_queue.next()
    slot = rig.storage.known_alarm()
    if earliest is None:
        return True
    bound = max(earliest, rig.clock.now_ms() + rig.sched.alarm.min_delay_ms)
    return slot is not None and slot <= bound


def pending_events_are_due(rig: Rig) -> bool:
    """An appended, unacknowledged event always has its lane due and an alarm set."""
    current = read_state(rig.storage)
    if current.recovery_event_seq == current.recovery_event_ack:
        return True
    lane = rig.sched.due_queue.get(RECOVERY_EVENTS)
    return (
        lane is not None
        and lane.due_at is not None
        and rig.storage.known_alarm() is not None
        and alarm_covers_due_lanes(rig)
    )


__all__ = [
    "CONFIG",
    "CrashingStorage",
    "Recorder",
    "Rig",
    "alarm_covers_due_lanes",
    "build",
    "end_pass",
    "pending_events_are_due",
]
