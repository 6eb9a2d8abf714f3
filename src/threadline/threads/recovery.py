"""Recovery: what to do with a Thread's submissions after an Attempt was lost.

``run(thread)`` looks at the Thread's open submissions and decides, per submission:

* a running submission whose claim was lost: one stamped by another incarnation (the object
  was reset), or by this one for a Thread it is not running any more (its task ended without
  settling), is lost at once; an unstamped claim is lost when its lease expired. A Thread
  whose Attempt this incarnation is running is never touched. A loss is not a failure: it is
  counted apart and spends no ``max_attempts`` (:mod:`threadline.threads.losses`).
  - with an accepted abort intent: settle it ``aborted``;
  - with an ``uncertain`` step started and never finished: make it an Unknown Outcome (the
    step may have acted; only an operator may say whether to retry it);
  - otherwise (an idempotent step or nothing in flight): ready it again at once, recording
    an ``AttemptLost`` error with its cause; or, when it is lost ``max_consecutive_losses``
    times in a row (no step finishing and no Attempt ending otherwise between them), settle
    it ``failed`` as a ``CrashLoop``;
* a ``terminalizing`` submission: settle it ``aborted``;
* a suspended submission whose timers are all due: apply them and ready it.

An Attempt that ended but whose end storage refused (twice) leaves its claim running; the
runtime hands its cause to :meth:`Recovery.hold`. Recovery then ends that claim on its next
sweep, without waiting for the lease, and records that cause instead of a loss: the Attempt
did end, so it spends ``max_attempts`` like any failure (a non-retryable cause settles it
``failed`` at once). A held end is applied even to an unstamped claim whose lease has not
expired. What is held lives in memory only: after an eviction the next incarnation finds the
claim stamped by another incarnation and recovers it at once as lost to a reset.

Each decision is one gate transaction, and a compare-and-set on the submission's revision, so a
recovery that runs twice (or races an Attempt) changes each submission at most once. A storage
or decoding failure blocks the Thread's recovery and is returned, not raised: the maintenance
pass records it as a recovery fault and carries on with other Threads.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass, field
from enum import StrEnum

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import ThreadlineError
from threadline.ids import IdSource
from threadline.storage.port import Storage
from threadline.threads import journal, losses, transitions, waits
from threadline.threads.ledger import Ledger
from threadline.threads.model import (
    JsonValue,
    LossCause,
    Outcome,
    SubmissionState,
    WaitKind,
    WorkItem,
    encode_json,
)
from threadline.threads.ports import NATIVE, PUBLICATION, MutationGate, commit_fact


class RecoveryDecision(StrEnum):
    """What recovery decided for one submission."""

    RE_READY = "re-ready"
    UNKNOWN_OUTCOME = "unknown-outcome"
    SETTLE_ABORTED = "settle-aborted"
    SETTLE_FAILED = "settle-failed"
    APPLY_TIMER = "apply-timer"


class Disposition(StrEnum):
    """Where the decision left the submission."""

    #: Runnable again; the next pass may start an Attempt.
    REPAIRED = "repaired"
    #: Parked as an Unknown Outcome until an operator resolves it (a stable wait).
    UNKNOWN = "unknown"
    #: Settled, exactly once.
    SETTLED = "settled"


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """One committed recovery decision."""

    submission_id: str
    thread_id: str
    decision: RecoveryDecision
    disposition: Disposition
    step_key: str | None = None


@dataclass(frozen=True, slots=True)
class RecoveryBlocked:
    """A Thread whose recovery could not run; its work stays pending, untouched."""

    thread_id: str
    failure: str
    error_type: str


@dataclass(frozen=True, slots=True)
class RecoverySweepResult:
    """Everything one recovery sweep decided, and the Threads it could not recover."""

    reports: tuple[RecoveryReport, ...] = field(default=())
    blocked: tuple[RecoveryBlocked, ...] = field(default=())

    def merge(self, other: RecoverySweepResult) -> RecoverySweepResult:
        """Both sweeps' reports and blocked Threads."""
        return RecoverySweepResult(self.reports + other.reports, self.blocked + other.blocked)


@dataclass(frozen=True, slots=True)
class UnwrittenEnd:
    """How an Attempt ended when storage refused to record it: its claim's revision, the
    error to record (``error``), whether that error is ``final`` (not worth a retry), and when
    a retry may start (``not_before``, the backoff the Attempt's end would have written)."""

    revision: int
    error: dict[str, JsonValue]
    final: bool
    not_before: int | None = None


class _Stale(Exception):
    """The submission moved after it was scanned; roll back and decide nothing."""


class Recovery:
    """Recovery decisions over one object's ledger."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        incarnation: str | None = None,
        active: Set[str] = frozenset(),
    ) -> None:
        # Recovery writes the ledger's own tables through the ledger's gate, clock and ids.
        self.ledger = ledger
        self.incarnation = incarnation
        # A live view of the Threads whose Attempt this incarnation runs.
        self.active = active
        self.storage: Storage = ledger.storage
        self.gate: MutationGate = ledger.gate
        self.clock: Clock = ledger.clock
        self.ids: IdSource = ledger.ids
        self.config: RuntimeConfig = ledger.config
        self._held: dict[str, UnwrittenEnd] = {}

    def hold(self, submission_id: str, end: UnwrittenEnd) -> None:
        """Remember how the Attempt holding ``submission_id`` at ``end.revision`` ended.

        The next sweep of its Thread ends the claim with ``end.error`` even before its lease
        expires: the Attempt is known to be over. A claim that moved on meanwhile (another
        revision) makes the held end moot; it is dropped, never applied to a later claim.
        """
        self._held[submission_id] = end

    @property
    def held(self) -> int:
        """Attempt ends held in memory, not yet recorded."""
        return len(self._held)

    def run(self, thread_id: str) -> RecoverySweepResult:
        """Recover one Thread; see the module docstring for the decisions."""
        reports: list[RecoveryReport] = []
        if thread_id in self.active:
            return RecoverySweepResult()
        try:
            for item in self.ledger.thread_open(thread_id):
                report = self._recover(item)
                if report is not None:
                    reports.append(report)
        except (ThreadlineError, ValueError, KeyError) as exc:
            blocked = RecoveryBlocked(thread_id, str(exc), type(exc).__name__)
            return RecoverySweepResult(tuple(reports), (blocked,))
        return RecoverySweepResult(tuple(reports))

    def _recover(self, item: WorkItem) -> RecoveryReport | None:
        now = self.clock.now_ms()
        held = self._held.pop(item.submission_id, None)
        if held is not None and (item.state is not SubmissionState.RUNNING
                                 or item.revision != held.revision):
            held = None  # that claim was ended by someone else
        try:
            if item.state is SubmissionState.RUNNING:
                if held is None and not self._claim_lost(item, now):
                    return None
                try:
                    return self._expired(item, held)
                except ThreadlineError:
                    if held is not None:
                        self._held[item.submission_id] = held  # not recorded yet: keep it
                    raise

            if item.state is SubmissionState.TERMINALIZING:
                return self._settle(item, Outcome.ABORTED, RecoveryDecision.SETTLE_ABORTED)
            if item.state is SubmissionState.SUSPENDED:
                return self._apply_timers(item)
        except _Stale:
            return None
        return None

    def _claim_lost(self, item: WorkItem, now: int) -> bool:
        """Whether the claim of a running submission can no longer be in flight.

        Called only for a Thread this incarnation is not running. A stamped claim is then
        lost whoever made it; only an unstamped one (no incarnation to tell) waits for its
        lease to expire.
        """
        owner = item.lease_owner
        if self.incarnation is not None and owner is not None and "/" in owner:
            return True
        return item.lease_expires_at is not None and item.lease_expires_at <= now

    def _expired(self, item: WorkItem, held: UnwrittenEnd | None) -> RecoveryReport:
        """End a lost claim, or one whose Attempt ended with ``held`` unrecorded."""
        if held is None:
            return self._lost(item)
        if transitions.abort_accepted(self.storage, item.submission_id):
            return self._settle(item, Outcome.ABORTED, RecoveryDecision.SETTLE_ABORTED)
        in_flight = journal.in_flight_uncertain(self.storage, item.submission_id)
        if in_flight is not None:
            return self._unknown(item, in_flight.step_key, in_flight.attempt, error=held.error)
        # The Attempt really ended, with this cause: it spends the budget like any failure.
        spent = losses.charged(self.storage, item)
        if spent >= self.config.max_attempts or held.final:
            return self._settle(item, Outcome.FAILED, RecoveryDecision.SETTLE_FAILED,
                                error=held.error)
        now = self.clock.now_ms()
        not_before = held.not_before

        def write() -> None:
            if not transitions.move(self.storage, item.submission_id, state=item.state,
                                    revision=item.revision, to=SubmissionState.READY, now=now,
                                    not_before=not_before, error=held.error):
                raise _Stale
            if not_before is not None:
                self.gate.schedule(NATIVE, not_before)

        commit_fact(self.gate, write)
        return RecoveryReport(item.submission_id, item.thread_id, RecoveryDecision.RE_READY,
                              Disposition.REPAIRED)

    def _lost(self, item: WorkItem) -> RecoveryReport:
        """End a claim lost without failing (see :mod:`threadline.threads.losses`).

        The loss is counted whatever follows, and what follows keeps its streak: an accepted
        abort still settles it aborted and an uncertain step in flight still makes it an
        Unknown Outcome; otherwise it is ready again at once, unless this loss is one too many
        in a row (a crash loop): then it settles ``failed``.
        """
        loss = losses.assess(self.storage, item, self._cause(item),
                             bound=self.config.max_consecutive_losses)

        def count() -> None:
            if not transitions.count_loss(self.storage, item.submission_id,
                                          revision=item.revision, streak=loss.streak,
                                          position=loss.position, cause=loss.cause):
                raise _Stale

        if transitions.abort_accepted(self.storage, item.submission_id):
            return self._settle(item, Outcome.ABORTED, RecoveryDecision.SETTLE_ABORTED,
                                count=count)
        in_flight = journal.in_flight_uncertain(self.storage, item.submission_id)
        if in_flight is not None:
            return self._unknown(item, in_flight.step_key, in_flight.attempt, count=count)
        if loss.crash_loop:
            return self._settle(item, Outcome.FAILED, RecoveryDecision.SETTLE_FAILED,
                                error=loss.error(), count=count)
        now = self.clock.now_ms()

        def write() -> None:
            if not transitions.lose(self.storage, item.submission_id, revision=item.revision,
                                    now=now, error=loss.error(), streak=loss.streak,
                                    position=loss.position, cause=loss.cause):
                raise _Stale

        commit_fact(self.gate, write)
        return RecoveryReport(item.submission_id, item.thread_id, RecoveryDecision.RE_READY,
                              Disposition.REPAIRED)

    def _cause(self, item: WorkItem) -> LossCause:
        """Why the claim of ``item`` was lost, from the incarnation that stamped it."""
        owner = item.lease_owner
        if self.incarnation is None or owner is None or "/" not in owner:
            return LossCause.LEASE_EXPIRED
        if owner.split("/", 1)[0] == self.incarnation:
            return LossCause.INTERRUPTED
        return LossCause.RESET

    def _unknown(
        self,
        item: WorkItem,
        step_key: str,
        attempt: int,
        *,
        error: JsonValue = None,
        count: Callable[[], None] | None = None,
    ) -> RecoveryReport:
        """Park ``item`` as an Unknown Outcome of ``step_key``; ``count`` first counts the
        loss of its claim in the same transaction (see :meth:`_settle`)."""
        now = self.clock.now_ms()

        def write() -> None:
            if count is not None:
                count()
            if not park_unknown(self.storage, self.ids.new_id("wait"), item.submission_id,
                                thread_id=item.thread_id, state=item.state,
                                revision=item.revision, step_key=step_key,
                                attempt=attempt, now=now, error=error,
                                loss_counted=count is not None):
                raise _Stale
            # Later input of the Thread may run past an Unknown Outcome: that is native work.

        commit_fact(self.gate, write)
        return RecoveryReport(item.submission_id, item.thread_id,
                              RecoveryDecision.UNKNOWN_OUTCOME, Disposition.UNKNOWN, step_key)

    def _apply_timers(self, item: WorkItem) -> RecoveryReport | None:
        now = self.clock.now_ms()
        pending = waits.open_waits(self.storage, item.submission_id)
        due = [w for w in pending if w.kind is WaitKind.TIMER and (w.wake_at or 0) <= now]
        if not due or len(due) != len(pending):
            return None

        def write() -> None:
            for wait in due:
                waits.resolve(self.storage, wait.id, decision_json=None, now=now)
            if not transitions.move(self.storage, item.submission_id, state=item.state,
                                    revision=item.revision, to=SubmissionState.READY, now=now,
                                    thread_id=item.thread_id):
                raise _Stale

        commit_fact(self.gate, write)
        return RecoveryReport(item.submission_id, item.thread_id, RecoveryDecision.APPLY_TIMER,
                              Disposition.REPAIRED)

    def _settle(
        self,
        item: WorkItem,
        outcome: Outcome,
        decision: RecoveryDecision,
        *,
        error: JsonValue = None,
        count: Callable[[], None] | None = None,
    ) -> RecoveryReport:
        """Settle ``item``; ``count``, when given, first counts the loss of its claim in the
        same transaction: that Attempt was lost, so the settlement keeps its loss streak
        (any other end of an Attempt restarts it)."""
        now = self.clock.now_ms()
        if outcome is Outcome.ABORTED:
            error = (transitions.accepted_abort(self.storage, item.submission_id)
                     or transitions.aborted_error(None))

        def write() -> None:
            if count is not None:
                count()
            if not transitions.settle(self.storage, item.submission_id, thread_id=item.thread_id,
                                      state=item.state, revision=item.revision, outcome=outcome,
                                      now=now, error=error, loss_counted=count is not None):
                raise _Stale

        commit_fact(self.gate, write, (NATIVE, PUBLICATION))
        return RecoveryReport(item.submission_id, item.thread_id, decision, Disposition.SETTLED)


def park_unknown(
    storage: Storage,
    wait_id: str,
    submission_id: str,
    *,
    thread_id: str,
    state: SubmissionState,
    revision: int,
    step_key: str,
    attempt: int,
    now: int,
    error: JsonValue = None,
    loss_counted: bool = False,
) -> bool:
    """Make the submission an Unknown Outcome of ``step_key``: open its wait, move it.

    Run inside a gate transaction. Compare-and-set on ``(state, revision)``: False, with the
    wait's insert to be rolled back by the caller, when the submission moved meanwhile.
    ``error`` (the failure that ended the Attempt, when one did) stays visible on it. An
    Attempt that steps aside this way restarts the loss streak, unless it was lost
    (``loss_counted``, see :func:`~threadline.threads.transitions.move`).
    """
    payload = encode_json({"step": step_key, "attempt": attempt})
    # One wait per lost run of the step: a step retried after an earlier resolution
    # and lost in flight again needs a new open wait, not the resolved one.
    waits.open_wait(storage, wait_id, submission_id, WaitKind.UNKNOWN,
                    unknown_wait_key(step_key, revision), thread_id=thread_id, now=now,
                    payload_json=payload)
    return transitions.move(storage, submission_id, state=state, revision=revision,
                            to=SubmissionState.UNKNOWN, now=now, error=error,
                            loss_counted=loss_counted)


def unknown_wait_key(step_key: str, revision: int) -> str:
    """The key of the Unknown Outcome wait for ``step_key``, lost by the Attempt that held the
    submission at ``revision``. Revisions never repeat, so neither do these keys."""
    return f"{step_key}@{revision}"


__all__ = [
    "Disposition",
    "Recovery",
    "RecoveryBlocked",
    "RecoveryDecision",
    "RecoveryReport",
    "RecoverySweepResult",
    "UnwrittenEnd",
    "park_unknown",
    "unknown_wait_key",
]
