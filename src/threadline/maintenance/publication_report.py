"""What delivery shows and logs: each subscriber's ``/maintenance`` readout, and a parking's
one log line (a subscriber's, or a required one's on one Thread), naming how to recover.

:class:`PublicationReport` is the part of
:class:`~threadline.maintenance.publication_lane.Publication` that reads and reports; it writes
only the "reported" mark that makes a parking's line appear once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from threadline.delivery.subscribers import SubscriberSpec, oversize_rule
from threadline.maintenance.publication_holds import GateHolds
from threadline.maintenance.required_gate import Hold, first_owed
from threadline.maintenance.subscriber_cursors import (
    SubscriberRow,
    log_end,
    mark_reported,
    read_rows,
)


class PublicationReport(GateHolds):
    """The readout and the parking reports of delivery (a base of
    :class:`~threadline.maintenance.publication_lane.Publication`)."""

    _open_work: Callable[[str], list[str]]

    @property
    def declared(self) -> bool:
        raise NotImplementedError

    def readout(self) -> list[dict[str, Any]]:
        """What ``/maintenance`` shows of each declared subscriber (reads; writes nothing)."""
        rows = read_rows(self._storage)
        end = log_end(self._storage)
        held = self.gated()
        now = self._clock.now_ms()
        out: list[dict[str, Any]] = []
        for spec in sorted(self._specs, key=lambda item: item.name):
            row = rows.get(spec.name) or SubscriberRow(spec.name, spec.version, 0, "active")
            position = max(row.cursor, self._read.get(spec.name, 0))
            held_on = self.holds(spec.name)
            if row.parked or any(hold.parked for hold in held_on.values()):
                state = "parked"
            elif (row.retry_at is not None and row.retry_at > now) or held_on:
                state = "backing-off"
            else:
                state = "delivering" if position < end else "caught-up"
            waiting = sorted(thread for thread, name in held.items() if name == spec.name)
            submissions = [submission for thread in waiting
                           for submission in self._open_work(thread)]
            out.append({
                "name": spec.name,
                "kinds": None if spec.kinds is None else sorted(spec.kinds),
                "required": spec.required, "version": spec.version, "batch": spec.batch,
                "batch_bytes": spec.batch_bytes, "oversize": oversize_rule(spec),
                "dispatch_timeout_ms": spec.dispatch_timeout_ms, "state": state,
                "cursor": row.cursor, "log_end": end, "delivered": row.delivered,
                "delivered_at": row.delivered_at, "failures": row.failures,
                "retry_at": row.retry_at, "error_type": row.error_type, "error": row.error,
                "detail": row.detail, "failed_at": row.failed_at,
                "waiting_threads": waiting, "waiting_submissions": submissions,
                "held_threads": [self._held_view(spec, hold)
                                 for _, hold in sorted(held_on.items())],
            })
        return out

    def _held_view(self, spec: SubscriberSpec, hold: Hold) -> dict[str, Any]:
        owed = first_owed(self._storage, hold, spec.kinds)
        return {**hold.shown(), "record_id": None if owed is None else owed.record_id}

    def report_parked(self) -> int:
        """Log each parked subscriber not reported yet, once (a required one with the
        Threads it holds); return how many."""
        if not self.declared:
            return 0
        pending = [row for row in self.rows().values() if row.parked and not row.reported]
        parked_holds = [hold for held_on in self._holds.values() for hold in held_on.values()
                        if hold.parked and not hold.reported]
        reported = self._report_parked_holds(parked_holds)
        if not pending:
            return reported
        held = self.gated()
        for row in pending:
            taken = self._storage.transaction(partial(mark_reported, self._storage, row.name))
            self._store(replace(row, reported=True))
            if taken != 1:
                continue
            reported += 1
            spec = self._specs.get(row.name)
            waiting = sorted(thread for thread, name in held.items() if name == row.name)
            gate = (f"; native work of {len(waiting)} thread(s) waits for it: "
                    f"{', '.join(waiting[:10])}" if spec is not None and spec.required
                    else "")
            self._log(
                f"threadline: subscriber {row.name!r} is parked: its destination refused a "
                f"batch ({row.error}){gate}; resume, skip or restart it (the operator's "
                f"subscriber routes), or bump its version"
            )
        return reported


__all__ = ["PublicationReport"]
