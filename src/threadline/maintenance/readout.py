"""What the maintenance package shows operators: faults, binding waits, pass reports,
schedules, host lanes and subscribers.

Read on request (the HTTP maintenance report), never by the pass itself. Each method returns
plain mappings shaped like the API's response models; members beyond those are passed through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from threadline.maintenance.bindings import BindingWaits
from threadline.maintenance.faults import RecoveryFaults
from threadline.maintenance.host_lanes import HostLanes
from threadline.maintenance.publication_lane import Publication
from threadline.maintenance.report import PassReport, PassReports
from threadline.maintenance.schedule_lanes import ScheduleRunner
from threadline.scheduling import DueQueue

#: How many pass reports the readout lists.
LISTED_REPORTS = 20


class MaintenanceReadout:
    """The object's recovery faults, binding waits, last pass reports, schedules and host
    lanes (these two only when given their sources)."""

    def __init__(
        self,
        faults: RecoveryFaults,
        bindings: BindingWaits,
        reports: PassReports,
        *,
        schedules: ScheduleRunner | None = None,
        host_lanes: HostLanes | None = None,
        due_queue: DueQueue | None = None,
        publication: Publication | None = None,
    ) -> None:
        self._faults = faults
        self._bindings = bindings
        self._reports = reports
        self._schedules = schedules
        self._host_lanes = host_lanes
        self._queue = due_queue
        self._publication = publication

    def faults(self) -> Sequence[Mapping[str, Any]]:
        """Open recovery faults, one per blocked Thread, by Thread id."""
        return [
            {
                "thread_id": fault.thread_id,
                "attempts": fault.attempts,
                "first_failed_at": fault.first_failed_at,
                "last_failed_at": fault.last_failed_at,
                "retry_at": fault.retry_at,
                "failure": fault.failure,
                "error_type": fault.error_type,
                "recipients": list(fault.recipients),
            }
            for fault in self._faults.all()
        ]

    def binding_waits(self) -> Sequence[Mapping[str, Any]]:
        """Submissions parked because their agent is not registered in this deployment."""
        return [
            {"submission_id": submission_id, "thread_id": thread_id, "agent": agent,
             "since": parked_at}
            for thread_id, submission_id, agent, parked_at in self._bindings.waits()
        ]

    def pass_reports(self) -> Sequence[Mapping[str, Any]]:
        """The last actionable and failed passes, newest first: this incarnation's from
        memory, then failed ones of earlier incarnations from storage (an actionable pass is
        not stored, so one run before the last restart is no longer listed; caught-up passes,
        which did nothing native, are never listed). See :meth:`PassReports.listed`."""
        return [_report(report) for report in self._reports.listed(LISTED_REPORTS)]

    def schedules(self) -> Sequence[Mapping[str, Any]]:
        """Each declared schedule: declaration, next and last fire, last error, state."""
        return () if self._schedules is None else self._schedules.readout()

    def host_lanes(self) -> Sequence[Mapping[str, Any]]:
        """Each declared host lane: phase, allowance and its due-queue row (idle if none)."""
        if self._host_lanes is None or self._queue is None:
            return ()
        out: list[Mapping[str, Any]] = []
        for declared in sorted(self._host_lanes, key=lambda lane: lane.id):
            row = self._queue.get(declared.id)
            out.append({
                "id": declared.id,
                "phase": declared.phase.value,
                "dispatch_timeout_ms": declared.dispatch_timeout_ms,
                "state": "idle" if row is None else row.state.value,
                "due_at": None if row is None else row.due_at,
                "stalls": 0 if row is None else row.stalls,
            })
        return out

    def subscribers(self) -> Sequence[Mapping[str, Any]]:
        """Each declared subscriber: its bounds (``batch``, ``batch_bytes``, and ``oversize``:
        what a record too large for its destination does), cursor, state, failures, the
        refusal that parked it, and for a required one behind, the Threads (and their open
        submissions) it holds."""
        if self._publication is None:
            return ()
        return self._publication.readout()


def _report(report: PassReport) -> dict[str, Any]:
    return {
        "phase": report.phase.value,
        "alarm": None if report.alarm is None else report.alarm.value,
        "alarm_at": report.alarm_at,
        "started_at": report.started_at,
        "recovered": report.recovered,
        "settled": report.settled,
        "dispatched": report.dispatched,
        "nonterminal": report.nonterminal,
        "rows_read": report.rows_read,
        "rows_written": report.rows_written,
        "statements": report.statements,
        "duration_ms": report.duration_ms,
        "failure_type": report.failure_type,
        "failure_message": report.failure_message,
        "attempts_failed": report.attempts_failed,
        "failed_attempts": [seen.as_json() for seen in report.failed_attempts],
    }


__all__ = ["LISTED_REPORTS", "MaintenanceReadout"]
