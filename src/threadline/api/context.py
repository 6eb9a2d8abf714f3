"""What the routes need of an object, handed to them as one small value.

The API layer sits below ``space``: it never sees a ``Space``, only the parts it uses. Whatever
builds the object (``Space``) fills an :class:`ApiContext`; tests may build one directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from threadline.api.revocation_list import Revocations
from threadline.api.stream_slots import StreamSlots
from threadline.api.subscribers import ChangeFeed, Subscribers
from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import NotFound
from threadline.scheduling import DueQueue
from threadline.storage.port import Storage
from threadline.threads.agents import AgentRegistry
from threadline.threads.ledger import Ledger
from threadline.threads.live_text import LiveStreams


class MaintenanceSources(Protocol):
    """The parts of the maintenance report that the maintenance package owns.

    Each method returns plain mappings shaped like the matching response model
    (``FaultView``, ``BindingWaitView``, ``PassReportView``, ``ScheduleView``,
    ``HostLaneView``); unknown extra members are passed through.
    ``threadline.maintenance.readout.MaintenanceReadout`` is the implementation a ``Space``
    wires in; :class:`NoMaintenanceSources` reports nothing (for contexts built without a
    maintenance pass).
    """

    def faults(self) -> Sequence[Mapping[str, Any]]:
        """Open recovery faults, one per blocked Thread."""
        ...

    def binding_waits(self) -> Sequence[Mapping[str, Any]]:
        """Submissions parked because their agent is not registered."""
        ...

    def pass_reports(self) -> Sequence[Mapping[str, Any]]:
        """The most recent pass reports, newest first."""
        ...

    def schedules(self) -> Sequence[Mapping[str, Any]]:
        """The declared schedules (``ScheduleView``), by id."""
        ...

    def host_lanes(self) -> Sequence[Mapping[str, Any]]:
        """The declared host lanes (``HostLaneView``), by id."""
        ...

    def subscribers(self) -> Sequence[Mapping[str, Any]]:
        """The declared subscribers (``SubscriberView``), by name."""
        ...


class NoMaintenanceSources:
    """Reports nothing: the object keeps no faults, binding waits, pass reports, schedules or
    host lanes."""

    def faults(self) -> Sequence[Mapping[str, Any]]:
        """No faults."""
        return ()

    def binding_waits(self) -> Sequence[Mapping[str, Any]]:
        """No binding waits."""
        return ()

    def pass_reports(self) -> Sequence[Mapping[str, Any]]:
        """No pass reports."""
        return ()

    def schedules(self) -> Sequence[Mapping[str, Any]]:
        """No schedules."""
        return ()

    def subscribers(self) -> Sequence[Mapping[str, Any]]:
        """No subscribers."""
        return ()

    def host_lanes(self) -> Sequence[Mapping[str, Any]]:
        """No host lanes."""
        return ()


class OperatorActions(Protocol):
    """What an operator may do to a stopped subscriber or lane without a deploy.

    Each returns a plain mapping shaped like its response model (``SubscriberView``; for a
    skip ``{"subscriber": SubscriberView, "skipped": SkippedRecordView}``; ``LaneView``) and
    raises the API's errors (``NotFound``, ``Conflict``, ``ValidationFailed``) for a refusal,
    having written nothing. ``threadline.maintenance.subscriber_operations`` is the
    implementation a ``Space`` wires in; :class:`NoOperatorActions` knows no subscriber or
    lane.
    """

    def resume(self, name: str, *, subject: str | None) -> Mapping[str, Any]:
        """Resume a parked or backing-off subscriber from its cursor."""
        ...

    def skip(
        self, name: str, *, cursor: int, record_id: str | None, subject: str | None
    ) -> Mapping[str, Any]:
        """Move a stopped subscriber past the one record at its cursor, if still ``cursor``."""
        ...

    def restart(self, name: str, *, position: int, subject: str | None) -> Mapping[str, Any]:
        """Deliver from ``position`` of the log."""
        ...

    def retry_lane(self, lane_id: str, *, subject: str | None) -> Mapping[str, Any]:
        """Make a parked lane due now."""
        ...


class NoOperatorActions:
    """Knows no subscriber and no lane: every action is a 404."""

    def resume(self, name: str, *, subject: str | None) -> Mapping[str, Any]:
        """No subscriber."""
        raise NotFound(f"no subscriber {name!r} is declared", field="subscriber")

    def skip(
        self, name: str, *, cursor: int, record_id: str | None, subject: str | None
    ) -> Mapping[str, Any]:
        """No subscriber."""
        raise NotFound(f"no subscriber {name!r} is declared", field="subscriber")

    def restart(self, name: str, *, position: int, subject: str | None) -> Mapping[str, Any]:
        """No subscriber."""
        raise NotFound(f"no subscriber {name!r} is declared", field="subscriber")

    def retry_lane(self, lane_id: str, *, subject: str | None) -> Mapping[str, Any]:
        """No lane."""
        raise NotFound(f"no lane {lane_id!r} in the due queue", field="lane")


@dataclass(frozen=True, slots=True)
class ApiContext:
    """One object's parts, as the routes use them.

    ``wake`` is the scheduler's droppable promptness hint (``AlarmService.schedule_now``): the
    routes call it after a committed mutation that makes work runnable, so the head starts
    within milliseconds instead of after the crash-fallback alarm's minimum delay. An
    admission passes ``due``, when its commit made the native lane due, sparing a queue read.
    """

    storage: Storage
    ledger: Ledger
    agents: AgentRegistry
    config: RuntimeConfig
    clock: Clock
    due_queue: DueQueue
    wake: Callable[..., None]
    schema_version: Callable[[], int]
    #: In-process commit notifications that wake the open event streams.
    changes: ChangeFeed
    maintenance: MaintenanceSources = field(default_factory=NoMaintenanceSources)
    #: The operator's actions on stopped subscribers and parked lanes.
    operators: OperatorActions = field(default_factory=NoOperatorActions)
    #: The event streams open on this object right now.
    subscribers: Subscribers = field(default_factory=Subscribers)
    #: Slots of the event streams open on this object, against the configured caps.
    streams: StreamSlots = field(default_factory=StreamSlots)
    #: The text agents stream right now, read by the event streams.
    live: LiveStreams = field(default_factory=LiveStreams)
    #: The space's revoked tokens (None: built from ``storage`` and ``clock``).
    revocations: Revocations = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.revocations is None:
            object.__setattr__(self, "revocations", Revocations(self.storage, self.clock))


__all__ = [
    "ApiContext", "MaintenanceSources", "NoMaintenanceSources", "NoOperatorActions",
    "OperatorActions",
]
