"""``PassReport``: what one maintenance pass did, and what it cost.

Every pass returns one. The recent reports of an incarnation are kept in memory (the last
:data:`KEPT_REPORTS`); only failed passes, the ones an operator needs after the object was lost
and restarted, are also stored (the last :data:`KEPT_REPORTS`, in ``tl_pass_reports``). Storing
every actionable pass would cost each unit of work one more row written (two once the table is
full and trimmed); a caught-up pass must write nothing but its alarm decision.

A report never carries user payloads: a failure is its exception type and message only, and
an Attempt that failed while the pass ran is named by its submission, Thread, agent, number
and error type (the latest :data:`~threadline.threads.failure_log.LISTED_FAILURES`; all of
them are counted).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from threadline.scheduling import AlarmDecision
from threadline.storage.meter import MeterReading
from threadline.storage.port import Row, Storage
from threadline.threads.failure_log import AttemptFailure
from threadline.threads.model import decode_json, encode_json

#: How many reports are kept in memory, and how many failed ones durably.
KEPT_REPORTS = 50
#: A failure message longer than this is cut.
MAX_FAILURE_CHARS = 500

_INSERT = """
INSERT INTO tl_pass_reports (started_at, phase, recovered, settled, dispatched, nonterminal,
    alarm, alarm_at, rows_read, rows_written, statements, duration_ms, failure_type,
    failure_message, attempts_failed, failed_attempts_json)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_TRIM = "DELETE FROM tl_pass_reports WHERE seq <= (SELECT max(seq) FROM tl_pass_reports) - ?"
_RECENT = """
SELECT started_at, phase, recovered, settled, dispatched, nonterminal, alarm, alarm_at,
    rows_read, rows_written, statements, duration_ms, failure_type, failure_message,
    attempts_failed, failed_attempts_json
FROM tl_pass_reports ORDER BY seq DESC LIMIT ?
"""


class PassPhase(StrEnum):
    """How a pass went: nothing native owed, native work run, or failed (and backed off)."""

    CAUGHT_UP = "caught-up"
    ACTIONABLE = "actionable"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PassReport:
    """One maintenance pass.

    ``recovered`` counts recovery decisions and blocked recoveries; ``settled`` the head
    Attempts that settled; ``dispatched`` the Attempts started; ``nonterminal`` the open
    submissions left in the Threads the pass visited (those with live, due or faulted work;
    Threads asleep on a timer that is not due are not read, so not counted).
    ``alarm``/``alarm_at`` is the final decision. The row figures are the storage meter's
    deltas over the pass (approximate on ``SqliteStorage``, see its meter).
    ``failure_type``/``failure_message`` are set only for a failed pass: they say why the
    pass itself failed. ``attempts_failed`` counts the Attempts that failed while it ran
    (their agents raised; the pass went on), and ``failed_attempts`` names the latest of them.
    """

    started_at: int
    phase: PassPhase
    recovered: int = 0
    settled: int = 0
    dispatched: int = 0
    nonterminal: int = 0
    alarm: AlarmDecision | None = None
    alarm_at: int | None = None
    rows_read: int = 0
    rows_written: int = 0
    statements: int = 0
    duration_ms: int = 0
    failure_type: str | None = None
    failure_message: str | None = None
    attempts_failed: int = 0
    failed_attempts: tuple[AttemptFailure, ...] = ()

    @classmethod
    def costed(cls, cost: MeterReading, **fields: object) -> PassReport:
        """A report with the row figures of ``cost`` (a meter delta)."""
        return cls(
            rows_read=cost.rows_read,
            rows_written=cost.rows_written,
            statements=cost.statements,
            **fields,  # type: ignore[arg-type]
        )

    @classmethod
    def from_row(cls, row: Row) -> PassReport:
        """Decode a ``tl_pass_reports`` row."""
        alarm = row["alarm"]
        return cls(
            started_at=int(row["started_at"]),
            phase=PassPhase(row["phase"]),
            recovered=int(row["recovered"]),
            settled=int(row["settled"]),
            dispatched=int(row["dispatched"]),
            nonterminal=int(row["nonterminal"]),
            alarm=None if alarm is None else AlarmDecision(alarm),
            alarm_at=row["alarm_at"],
            rows_read=int(row["rows_read"]),
            rows_written=int(row["rows_written"]),
            statements=int(row["statements"]),
            duration_ms=int(row["duration_ms"]),
            failure_type=row["failure_type"],
            failure_message=row["failure_message"],
            attempts_failed=int(row["attempts_failed"]),
            failed_attempts=tuple(
                AttemptFailure(**seen) for seen in decode_json(row["failed_attempts_json"]) or ()
            ),
        )


def failure_fields(exc: BaseException) -> dict[str, str]:
    """The failure of a pass as a report carries it: type name and a bounded message."""
    message = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
    return {"failure_type": type(exc).__name__, "failure_message": message[:MAX_FAILURE_CHARS]}


class PassReports:
    """The reports of one object: recent ones in memory, failed ones durable too."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        #: The most recent reports of this incarnation, oldest first.
        self.recent: deque[PassReport] = deque(maxlen=KEPT_REPORTS)
        #: Caught-up passes this incarnation ran.
        self.caught_up = 0
        #: The most recent actionable and failed reports of this incarnation, oldest first.
        self._notable: deque[PassReport] = deque(maxlen=KEPT_REPORTS)
        #: Failed reports this incarnation stored (the newest rows of ``tl_pass_reports``).
        self._stored_here = 0

    def keep(self, report: PassReport) -> None:
        """Remember ``report``; store it too when the pass failed (one insert, one trim)."""
        self.recent.append(report)
        if report.phase is PassPhase.CAUGHT_UP:
            self.caught_up += 1
            return
        self._notable.append(report)
        if report.phase is not PassPhase.FAILED:
            return

        def store() -> None:
            self._storage.exec(
                _INSERT, report.started_at, report.phase.value, report.recovered,
                report.settled, report.dispatched, report.nonterminal,
                None if report.alarm is None else report.alarm.value, report.alarm_at,
                report.rows_read, report.rows_written, report.statements, report.duration_ms,
                report.failure_type, report.failure_message, report.attempts_failed,
                encode_json([seen.as_json() for seen in report.failed_attempts])
                if report.failed_attempts else None,
            )
            self._storage.exec(_TRIM, KEPT_REPORTS)

        self._storage.transaction(store)
        self._stored_here += 1

    def stored(self, limit: int = KEPT_REPORTS) -> list[PassReport]:
        """The durable (failed) reports, newest first."""
        return [PassReport.from_row(row) for row in self._storage.exec(_RECENT, limit)]

    def listed(self, limit: int = KEPT_REPORTS) -> list[PassReport]:
        """The passes an operator audits, newest first: this incarnation's actionable and
        failed passes (from memory), then the failed passes of earlier incarnations (stored).

        Caught-up passes, which did nothing native, are left out. The stored rows are read
        only when memory holds fewer than ``limit``; those this incarnation stored itself are
        already listed from memory and skipped.
        """
        here = list(reversed(self._notable))[:limit]
        if len(here) >= limit:
            return here
        earlier = self.stored(limit + self._stored_here)[self._stored_here:]
        return (here + earlier)[:limit]


__all__ = [
    "KEPT_REPORTS",
    "PassPhase",
    "PassReport",
    "PassReports",
    "failure_fields",
]
