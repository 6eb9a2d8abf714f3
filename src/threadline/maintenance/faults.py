"""Recovery faults and the recovery-event log.

A Thread whose recovery fails (its records cannot be read or decoded), or whose head storage
refuses to dispatch, gets one durable fault row instead of an error that would fail the whole
pass: the pass skips that Thread until the fault's ``retry_at`` and goes on with the others.
The fault names its *recipients*, the submissions it was reported to; they stay recipients
until the fault clears, even if they settle meanwhile, so each of them also hears that it
cleared. A recovery that succeeds does not end the fault by itself: the pass clears it once
the head it held back is dispatched, or once the Thread has nothing to dispatch (no open work
left, all of it aborted by an operator, say). A failure in between is the same fault's next
attempt, so a failure that keeps repeating backs off to the cap instead of flapping between
``cleared`` and a new fault retried at 5 s.

Every transition appends events to one log with a monotonic sequence (the generation
record's ``recovery_event_seq``): ``created`` for each newly affected submission, ``changed``
for each recipient when the failure itself changes, ``cleared`` for each recipient when the
fault clears, and ``parked`` for a binding wait (:mod:`threadline.maintenance.bindings`).
The ``threadline:recovery-events`` lane delivers them in order, at least once, to the host's
``@app.on_recovery_event`` hook and acknowledges them one by one
(``recovery_event_ack``).

Every write goes through the mutation gate: the fault, its events, the enrollment of the
events lane and the alarm commit in one transaction, so an eviction at any point either loses
the whole transition or leaves it due.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from threadline.clock import Clock
from threadline.errors import StorageError
from threadline.maintenance.lane_wave import current_wave
from threadline.scheduling import state
from threadline.scheduling.due_queue import NATIVE, RECOVERY_EVENTS
from threadline.scheduling.gate import MutationGate
from threadline.storage.port import Row, Storage
from threadline.threads.recovery import RecoverySweepResult

#: ``attempts`` of a fault saturates here instead of overflowing a 32-bit consumer.
MAX_FAULT_ATTEMPTS = 2**31 - 1
#: First automatic recovery retry after a fault; it doubles per attempt up to the cap.
FAULT_RETRY_BASE_MS = 5_000
#: Longest wait between two automatic recovery retries of one Thread.
FAULT_RETRY_CAP_MS = 60_000
#: Bound of one delivery wave of the ``threadline:recovery-events`` lane.
RECOVERY_EVENTS_DISPATCH_TIMEOUT_MS = 30_000
#: Failure text longer than this is cut: a fault row must stay small whatever the error said.
MAX_FAILURE_CHARS = 2_000

EventKind = Literal["created", "changed", "cleared", "parked"]
RecoveryEventHook = Callable[["RecoveryEvent"], Awaitable[None] | None]

_logger = logging.getLogger("threadline.maintenance")

_SELECT_FAULT = """
SELECT thread_id, first_failed_at, last_failed_at, attempts, retry_at, failure, error_type
FROM tl_recovery_faults WHERE thread_id = ?
"""
_SELECT_FAULTS = """
SELECT thread_id, first_failed_at, last_failed_at, attempts, retry_at, failure, error_type
FROM tl_recovery_faults ORDER BY thread_id
"""
_SELECT_RECIPIENTS = """
SELECT submission_id FROM tl_recovery_recipients WHERE thread_id = ? ORDER BY position
"""
_SELECT_ALL_RECIPIENTS = """
SELECT thread_id, submission_id FROM tl_recovery_recipients ORDER BY thread_id, position
"""
_UPSERT_FAULT = """
INSERT INTO tl_recovery_faults (
    thread_id, first_failed_at, last_failed_at, attempts, retry_at, failure, error_type)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (thread_id) DO UPDATE SET
    last_failed_at = excluded.last_failed_at, attempts = excluded.attempts,
    retry_at = excluded.retry_at, failure = excluded.failure, error_type = excluded.error_type
"""
_INSERT_RECIPIENT = """
INSERT INTO tl_recovery_recipients (thread_id, submission_id, position) VALUES (?, ?, ?)
ON CONFLICT DO NOTHING
"""
_DELETE_RECIPIENTS = "DELETE FROM tl_recovery_recipients WHERE thread_id = ?"
_DELETE_FAULT = "DELETE FROM tl_recovery_faults WHERE thread_id = ?"
_SELECT_DEADLINES = "SELECT thread_id, retry_at FROM tl_recovery_faults"
_SELECT_SKIPPED = "SELECT thread_id FROM tl_recovery_faults WHERE retry_at > ?"
_SELECT_NEXT_RETRY = "SELECT min(retry_at) AS retry_at FROM tl_recovery_faults"
_INSERT_EVENT = """
INSERT INTO tl_recovery_events (seq, kind, thread_id, submission_id, body_json, at)
VALUES (?, ?, ?, ?, ?, ?)
"""
_SELECT_EVENT = """
SELECT seq, kind, thread_id, submission_id, body_json, at FROM tl_recovery_events WHERE seq = ?
"""
_SELECT_EVENTS_FROM = """
SELECT seq, kind, thread_id, submission_id, body_json, at FROM tl_recovery_events
WHERE seq > ? ORDER BY seq
"""
_DELETE_EVENT = "DELETE FROM tl_recovery_events WHERE seq = ?"


@dataclass(frozen=True, slots=True)
class Fault:
    """A Thread whose recovery is blocked; its head is not dispatched before ``retry_at``.

    ``attempts`` counts failed recoveries (saturating at :data:`MAX_FAULT_ATTEMPTS`);
    ``recipients`` are the submissions the fault was reported to, in the order they were
    added. The record is neither a settlement nor evidence that no external effect happened.
    """

    thread_id: str
    first_failed_at: int
    last_failed_at: int
    attempts: int
    retry_at: int
    failure: str
    error_type: str
    recipients: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RecoveryEvent:
    """One appended transition, as the ``@app.on_recovery_event`` hook receives it.

    ``seq`` is monotonic within the object and unchanged when a delivery is retried, so a host
    deduplicates by (object, ``seq``). ``fault`` is the fault after the transition; for
    ``cleared`` it is the last fault before it cleared, and for ``parked`` it is None.
    ``submission_id`` names the affected submission (None only for a fault that had no
    recipient); ``agent`` is set for ``parked``.
    """

    seq: int
    kind: EventKind
    thread_id: str
    fault: Fault | None
    at: int
    submission_id: str | None = None
    agent: str | None = None


@dataclass(frozen=True, slots=True)
class EventDraft:
    """An event before it has a sequence number; see :func:`append_events`."""

    kind: EventKind
    thread_id: str
    fault: Fault | None
    submission_id: str | None = None
    agent: str | None = None


def fault_retry_delay_ms(previous_attempts: int) -> int:
    """Delay before the next recovery retry of a fault that already failed ``previous_attempts``
    times: ``min(60 s, 5 s * 2**min(30, previous_attempts))`` (5 s for a new fault)."""
    exponent = min(30, max(0, previous_attempts))
    return min(FAULT_RETRY_CAP_MS, FAULT_RETRY_BASE_MS << exponent)


def append_events(
    storage: Storage, gate: MutationGate, clock: Clock, drafts: Sequence[EventDraft]
) -> list[int]:
    """Append ``drafts`` to the event log in order and make the events lane due; return the seqs.

    Must run inside the source transaction (normally a :meth:`MutationGate.mutate` body): the
    sequence reservation, the rows, the lane's progress enrollment and the alarm commit
    together, which is the alarm invariant for the events lane.
    """
    if not drafts:
        return []
    now = clock.now_ms()
    last = state.append_recovery_events(storage, len(drafts))
    first = last - len(drafts) + 1
    for offset, draft in enumerate(drafts):
        body = {
            "fault": None if draft.fault is None else _fault_json(draft.fault),
            "agent": draft.agent,
        }
        storage.exec(
            _INSERT_EVENT,
            first + offset,
            draft.kind,
            draft.thread_id,
            draft.submission_id,
            json.dumps(body, sort_keys=True, separators=(",", ":")),
            now,
        )
    gate.record_progress((RECOVERY_EVENTS,))
    return list(range(first, last + 1))


class EventAppender:
    """Base of a durable store whose gate transactions append to the recovery-event log.

    Holds the collaborators every such transition needs, and an operator log that defaults to
    the maintenance logger's error level.
    """

    def __init__(
        self,
        storage: Storage,
        gate: MutationGate,
        clock: Clock,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._storage = storage
        self._gate = gate
        self._clock = clock
        self._log = log if log is not None else _logger.error

    def _append(self, drafts: Sequence[EventDraft]) -> None:
        """:func:`append_events`; call it inside the transition's gate transaction."""
        append_events(self._storage, self._gate, self._clock, drafts)


class RecoveryFaults(EventAppender):
    """The durable fault records and the transitions that append recovery events.

    An incarnation rebuilds it from storage for free. It remembers the deadlines it last read
    outside a transaction (:meth:`deadlines`) until it writes a fault itself: only it writes
    them in an incarnation, so a pass does not read the (usually empty) table each time.
    """

    #: ``deadlines()`` as last read outside a transaction, until the next fault write.
    _known: dict[str, int] | None = None

    def record(
        self,
        thread_id: str,
        *,
        failure: str,
        error_type: str,
        recipients: Iterable[str] = (),
    ) -> Fault:
        """Record one failed recovery of ``thread_id`` and return the fault as committed.

        One gate transaction upserts the fault (``first_failed_at`` kept, ``attempts`` + 1
        saturating at :data:`MAX_FAULT_ATTEMPTS`, ``retry_at = now +``
        :func:`fault_retry_delay_ms` of the previous attempts), adds the new ``recipients``,
        appends ``created`` for each new recipient (or one Thread-level ``created`` for a new
        fault without any) and ``changed`` for each known recipient when the failure text or
        type differs, and enrolls the native lane by ``retry_at``. A repeat of the same failure
        with no new recipient appends nothing: the host hears of transitions, not of retries.
        A new fault is logged once (Thread id and error type, never the failure text).
        """
        wanted = _unique(recipients)
        failure = _clean(failure)
        error_type = _clean(error_type)[:200]
        created: list[bool] = []

        self._known = None

        def body() -> Fault:
            now = self._clock.now_ms()
            previous = self._read(thread_id)
            known = () if previous is None else previous.recipients
            seen = set(known)
            added = tuple(sid for sid in wanted if sid not in seen)
            before = 0 if previous is None else previous.attempts
            fault = Fault(
                thread_id=thread_id,
                first_failed_at=now if previous is None else previous.first_failed_at,
                last_failed_at=now,
                attempts=min(MAX_FAULT_ATTEMPTS, before + 1),
                retry_at=now + fault_retry_delay_ms(before),
                failure=failure,
                error_type=error_type,
                recipients=known + added,
            )
            self._storage.exec(
                _UPSERT_FAULT,
                thread_id,
                fault.first_failed_at,
                fault.last_failed_at,
                fault.attempts,
                fault.retry_at,
                fault.failure,
                fault.error_type,
            )
            self._add_recipients(thread_id, len(known), added)
            drafts: list[EventDraft] = []
            if previous is not None and (previous.failure, previous.error_type) != (
                failure,
                error_type,
            ):
                drafts.extend(_per_recipient("changed", fault, known))
            drafts.extend(EventDraft("created", thread_id, fault, sid) for sid in added)
            if previous is None and not added:
                drafts.append(EventDraft("created", thread_id, fault))
            self._append(drafts)
            # Eviction before the pass's checkpoint must still bring the Thread back by then.
            self._gate.schedule(NATIVE, fault.retry_at)
            created.append(previous is None)
            return fault

        fault = self._gate.mutate(body, invalidates_recovery=False)
        if created and created[-1]:
            self._log(
                f"threadline: recovery of thread {thread_id!r} is blocked ({error_type}); "
                f"its accepted work stays pending, retry at {fault.retry_at}"
            )
        return fault

    def note_recipients(self, thread_id: str, submission_ids: Iterable[str]) -> tuple[str, ...]:
        """Add submissions admitted while ``thread_id`` is under a fault; return the new ones.

        Each new recipient gets a ``created`` event; the fault's attempts and ``retry_at`` are
        untouched, so admissions never speed up a backoff. Without a fault, or when every
        submission is already a recipient, nothing is written (one or two row reads).
        Repeating it changes nothing: a known recipient is skipped.
        """
        wanted = _unique(submission_ids)

        def body() -> tuple[str, ...]:
            previous = self._read(thread_id)
            if previous is None:
                return ()
            seen = set(previous.recipients)
            added = tuple(sid for sid in wanted if sid not in seen)
            if not added:
                return ()
            self._add_recipients(thread_id, len(previous.recipients), added)
            fault = replace(previous, recipients=previous.recipients + added)
            self._append([EventDraft("created", thread_id, fault, sid) for sid in added])
            return added

        return self._gate.mutate(body, invalidates_recovery=False)

    def clear(self, thread_id: str) -> bool:
        """Delete the fault of ``thread_id`` after a successful recovery; False if there is none.

        One gate transaction deletes it with its recipients and appends ``cleared`` for each
        recipient (carrying the last fault). Clearing again finds nothing and writes nothing.
        """

        self._known = None

        def body() -> bool:
            previous = self._read(thread_id)
            if previous is None:
                return False
            self._storage.exec(_DELETE_RECIPIENTS, thread_id)
            self._storage.exec(_DELETE_FAULT, thread_id)
            self._append(_per_recipient("cleared", previous, previous.recipients))
            return True

        return self._gate.mutate(body, invalidates_recovery=False)

    def observe(
        self,
        thread_id: str,
        result: RecoverySweepResult,
        *,
        recipients: Iterable[str] = (),
        faulted: bool = True,
    ) -> Fault | None:
        """Commit what one recovery of ``thread_id`` means for its fault; return the fault.

        Blocked: :meth:`record` its failure for ``recipients`` (the Thread's open
        submissions) and return the fault. Not blocked: :meth:`clear` any fault and return
        None; pass ``faulted=False`` when the caller knows (from :meth:`deadlines`) that the
        Thread has no fault, to skip even that one row read.
        """
        blocked = [b for b in result.blocked if b.thread_id == thread_id]
        if blocked:
            last = blocked[-1]
            return self.record(
                thread_id, failure=last.failure, error_type=last.error_type, recipients=recipients
            )
        if faulted:
            self.clear(thread_id)
        return None

    def deadlines(self) -> dict[str, int]:
        """``retry_at`` of every faulted Thread (one statement; the table is usually empty).

        A pass reads it once: a Thread whose deadline is ahead is not dispatched, and one
        whose deadline passed is recovered again before its head may run. Read outside a
        transaction, it is remembered until this object next records or clears a fault.
        """
        if self._known is not None:
            return dict(self._known)
        read = {
            str(row["thread_id"]): int(row["retry_at"])
            for row in self._storage.exec(_SELECT_DEADLINES)
        }
        if not self._storage.in_transaction():
            # Read inside a transaction, it could include writes that roll back.
            self._known = dict(read)
        return read

    def get(self, thread_id: str) -> Fault | None:
        """The fault of ``thread_id`` with its recipients, or None."""
        return self._read(thread_id)

    def skipped(self, now: int) -> frozenset[str]:
        """Threads under a fault whose ``retry_at`` is still ahead of ``now``."""
        return frozenset(str(row["thread_id"]) for row in self._storage.exec(_SELECT_SKIPPED, now))

    def next_retry_at(self) -> int | None:
        """The earliest ``retry_at`` of any fault, or None when no Thread is faulted."""
        value = self._storage.exec(_SELECT_NEXT_RETRY).scalar()
        return None if value is None else int(value)

    def all(self) -> list[Fault]:
        """Every fault with its recipients, ordered by Thread id (for operators and tests)."""
        recipients: dict[str, list[str]] = {}
        for row in self._storage.exec(_SELECT_ALL_RECIPIENTS):
            recipients.setdefault(str(row["thread_id"]), []).append(str(row["submission_id"]))
        return [
            _fault_from_fields(row, tuple(recipients.get(str(row["thread_id"]), ())))
            for row in self._storage.exec(_SELECT_FAULTS)
        ]

    def _read(self, thread_id: str) -> Fault | None:
        row = self._storage.exec(_SELECT_FAULT, thread_id).first()
        if row is None:
            return None
        ids = tuple(
            str(r["submission_id"]) for r in self._storage.exec(_SELECT_RECIPIENTS, thread_id)
        )
        return _fault_from_fields(row, ids)

    def _add_recipients(self, thread_id: str, start: int, added: Sequence[str]) -> None:
        for offset, submission_id in enumerate(added):
            self._storage.exec(_INSERT_RECIPIENT, thread_id, submission_id, start + offset)


class RecoveryEvents:
    """Delivery of the recovery-event log: the handler of the ``threadline:recovery-events`` lane.

    With no hook registered, events are acknowledged without delivery after one log line
    each, so an unobserved log never grows or keeps the lane busy.
    """

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        hook: RecoveryEventHook | None,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._storage = storage
        self._clock = clock
        self._hook = hook
        self._log = log if log is not None else _logger.warning

    def pending(self) -> bool:
        """True while an appended event awaits acknowledgement (one row read)."""
        return state.read_state(self._storage).recovery_events_pending

    def unacknowledged(self) -> list[RecoveryEvent]:
        """Every appended event not yet acknowledged, in order."""
        ack = state.read_state(self._storage).recovery_event_ack
        return [_event_from_row(row) for row in self._storage.exec(_SELECT_EVENTS_FROM, ack)]

    async def run_lane(self, now: int, deadline: int) -> int | None:
        """Deliver unacknowledged events in ``seq`` order; None once all are acknowledged.

        Each event goes to the hook and is acknowledged (compare-and-set on the previous
        acknowledgement, which also deletes the row) only after the hook returns, so an
        eviction in between redelivers it: delivery is at least once. A raising hook
        propagates; its event and every later one stay unacknowledged for the lane's retry.
        When the clock reaches ``deadline`` it stops and returns the current time, meaning the
        lane is still due. Events appended while it runs are delivered in the same wave.
        """
        del now  # the lane runner's claim time; deliveries are timed by the clock itself
        current = state.read_state(self._storage)
        while current.recovery_event_ack < current.recovery_event_seq:
            for seq in range(current.recovery_event_ack + 1, current.recovery_event_seq + 1):
                at = self._clock.now_ms()
                if at >= deadline:
                    return at
                event = self._read(seq)
                await self._deliver(event)
                self._acknowledge(seq)
            current = state.read_state(self._storage)
        return None

    async def _deliver(self, event: RecoveryEvent) -> None:
        if self._hook is None:
            self._log(
                f"threadline: recovery event {event.seq} ({event.kind}, thread "
                f"{event.thread_id!r}) acknowledged without a hook"
            )
            return
        result = self._hook(event)
        if inspect.isawaitable(result):
            await result

    def _acknowledge(self, seq: int) -> None:
        wave = current_wave()

        def ack() -> None:
            # A lost race means the event was already acknowledged; its row is gone then.
            if state.acknowledge_recovery_event(self._storage, seq):
                self._storage.exec(_DELETE_EVENT, seq)
                if wave is not None:
                    # Refused once the wave ended: an abandoned hook's late ack rolls back.
                    wave.progress()

        self._storage.transaction(ack)

    def _read(self, seq: int) -> RecoveryEvent:
        row = self._storage.exec(_SELECT_EVENT, seq).first()
        if row is None:
            raise StorageError(f"recovery event {seq} is missing from the event log")
        return _event_from_row(row)


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        raise TypeError("recipients must be an iterable of submission ids, not one string")
    return tuple(dict.fromkeys(str(v) for v in values))


def _clean(text: str) -> str:
    """Cut ``text`` to :data:`MAX_FAILURE_CHARS` and make it encodable as UTF-8."""
    cut = str(text)[:MAX_FAILURE_CHARS]
    return cut.encode("utf-8", "replace").decode("utf-8")


def _per_recipient(kind: EventKind, fault: Fault, recipients: Sequence[str]) -> list[EventDraft]:
    if not recipients:
        return [EventDraft(kind, fault.thread_id, fault)]
    return [EventDraft(kind, fault.thread_id, fault, sid) for sid in recipients]


def _fault_from_fields(fields: Mapping[str, Any], recipients: tuple[str, ...]) -> Fault:
    """A fault from a ``tl_recovery_faults`` row or the ``fault`` object of an event body."""
    return Fault(
        thread_id=str(fields["thread_id"]),
        first_failed_at=int(fields["first_failed_at"]),
        last_failed_at=int(fields["last_failed_at"]),
        attempts=int(fields["attempts"]),
        retry_at=int(fields["retry_at"]),
        failure=str(fields["failure"]),
        error_type=str(fields["error_type"]),
        recipients=recipients,
    )


def _fault_json(fault: Fault) -> dict[str, Any]:
    return {
        "thread_id": fault.thread_id,
        "first_failed_at": fault.first_failed_at,
        "last_failed_at": fault.last_failed_at,
        "attempts": fault.attempts,
        "retry_at": fault.retry_at,
        "failure": fault.failure,
        "error_type": fault.error_type,
        "recipients": list(fault.recipients),
    }


def _event_from_row(row: Row) -> RecoveryEvent:
    body = json.loads(str(row["body_json"]))
    raw = body.get("fault")
    fault = None
    if raw is not None:
        fault = _fault_from_fields(raw, tuple(str(s) for s in raw["recipients"]))
    submission = row["submission_id"]
    agent = body.get("agent")
    return RecoveryEvent(
        seq=int(row["seq"]),
        kind=cast(EventKind, str(row["kind"])),
        thread_id=str(row["thread_id"]),
        fault=fault,
        at=int(row["at"]),
        submission_id=None if submission is None else str(submission),
        agent=None if agent is None else str(agent),
    )


__all__ = [
    "FAULT_RETRY_BASE_MS",
    "FAULT_RETRY_CAP_MS",
    "MAX_FAILURE_CHARS",
    "MAX_FAULT_ATTEMPTS",
    "RECOVERY_EVENTS_DISPATCH_TIMEOUT_MS",
    "EventAppender",
    "EventDraft",
    "EventKind",
    "Fault",
    "RecoveryEvent",
    "RecoveryEventHook",
    "RecoveryEvents",
    "RecoveryFaults",
    "append_events",
    "fault_retry_delay_ms",
]
