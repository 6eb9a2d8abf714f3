"""The single-alarm substrate: due queue, alarm slot, mutation gate, generation record, failpoints.

This layer knows nothing of threads. :func:`build_scheduler` wires one object's parts together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.scheduling.alarm import AlarmDecision, AlarmService
from threadline.scheduling.due_queue import (
    DELAYED,
    FRAMEWORK_LANES,
    LIFECYCLE,
    MESSAGES,
    NATIVE,
    PARKED_RETRY_MS,
    PROJECTION,
    PUBLICATION,
    RECOVERY_EVENTS,
    RETENTION,
    DueQueue,
    Lane,
    LaneState,
    backoff_ms,
    validate_host_lane_id,
    validate_lane_id,
)
from threadline.scheduling.failpoints import (
    FAILPOINT_LOCATIONS,
    MAINTENANCE_LOCATIONS,
    PUBLICATION_LOCATIONS,
    RETENTION_LOCATIONS,
    RUNTIME_LOCATIONS,
    SCHEDULE_LOCATIONS,
    FailpointGate,
    Failpoints,
)
from threadline.scheduling.gate import MutationGate
from threadline.scheduling.state import MaintenanceState, NativeRetry, read_state
from threadline.storage.port import Storage


@dataclass(frozen=True, slots=True)
class Scheduler:
    """The scheduling parts of one object incarnation, sharing one storage, clock and Random."""

    storage: Storage
    clock: Clock
    config: RuntimeConfig
    due_queue: DueQueue
    alarm: AlarmService
    gate: MutationGate
    failpoints: Failpoints


def build_scheduler(
    storage: Storage,
    clock: Clock,
    config: RuntimeConfig,
    rng: random.Random,
    failpoints: Failpoints | None = None,
) -> Scheduler:
    """Wire a due queue, alarm service and mutation gate over ``storage``.

    Build exactly one per incarnation and share its gate with every producer: a second gate
    could not see the first one's mutations in flight. ``failpoints`` defaults to an inert set.
    """
    points = failpoints if failpoints is not None else Failpoints()
    queue = DueQueue(storage, config, rng)
    alarm = AlarmService(storage, clock, config, queue)
    gate = MutationGate(storage, clock, config, queue, alarm, points)
    return Scheduler(storage, clock, config, queue, alarm, gate, points)


__all__ = [
    "DELAYED",
    "FAILPOINT_LOCATIONS",
    "FRAMEWORK_LANES",
    "LIFECYCLE",
    "MAINTENANCE_LOCATIONS",
    "MESSAGES",
    "NATIVE",
    "PARKED_RETRY_MS",
    "PROJECTION",
    "PUBLICATION",
    "PUBLICATION_LOCATIONS",
    "RECOVERY_EVENTS",
    "RETENTION",
    "RETENTION_LOCATIONS",
    "RUNTIME_LOCATIONS",
    "SCHEDULE_LOCATIONS",
    "AlarmDecision",
    "AlarmService",
    "DueQueue",
    "FailpointGate",
    "Failpoints",
    "Lane",
    "LaneState",
    "MaintenanceState",
    "MutationGate",
    "NativeRetry",
    "Scheduler",
    "backoff_ms",
    "build_scheduler",
    "read_state",
    "validate_host_lane_id",
    "validate_lane_id",
]
