"""Operator decisions on submissions: aborts, approval decisions and Unknown Outcome resolutions.

:class:`OperatorDecisions` is mixed into :class:`~threadline.threads.ledger.Ledger`, which
supplies the storage, gate, clock, configuration and abort watch declared here, its read of one
submission and the admission of a delayed one. Each decision commits in a gate transaction as a
compare-and-set on what it read, so a decision delivered twice changes the ledger once.
"""

from __future__ import annotations

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import Conflict, NotFound, ValidationFailed
from threadline.storage.port import Storage
from threadline.threads import delayed, history, journal, transitions, waits
from threadline.threads.abort_watch import AbortWatch
from threadline.threads.model import (
    ApprovalDecision,
    JsonValue,
    Outcome,
    Resolution,
    ScheduledSubmission,
    StepState,
    Submission,
    SubmissionState,
    WaitKind,
    WaitState,
    check_subject,
    encode_json,
)
from threadline.threads.ports import NATIVE, PUBLICATION, MutationGate, commit_fact
from threadline.threads.records import APPROVAL_DECIDED

# The first abort requested is the one kept, with its reason and who asked: a second request
# while a running Attempt has yet to observe the first changes nothing.
_ACCEPT_INTENT = (
    "INSERT INTO tl_abort_intents (submission_id, state, reason, requested_at, requested_by)"
    " VALUES (?, 'accepted', ?, ?, ?) ON CONFLICT (submission_id) DO NOTHING"
)

#: Longest abort reason kept: it is a note for people, stored with the intent and the error.
MAX_ABORT_REASON_CHARS = 1_000

#: Open states an abort settles at once: no Attempt is running that must observe it first.
_ABORT_AT_ONCE = frozenset(
    {
        SubmissionState.QUEUED,
        SubmissionState.READY,
        SubmissionState.SUSPENDED,
        SubmissionState.UNKNOWN,
        SubmissionState.TERMINALIZING,
    }
)


class OperatorDecisions:
    """Every decision an operator may make about a submission (a mixin of the Ledger)."""

    storage: Storage
    gate: MutationGate
    clock: Clock
    config: RuntimeConfig
    aborts: AbortWatch

    def get(self, submission_id: str) -> Submission:
        """The submission, decoded; :class:`NotFound` when there is none (the Ledger's read)."""
        raise NotImplementedError

    def _admit_delayed(self, row: delayed.Delayed, now: int) -> bool:
        """Move a delayed submission into its Thread's FIFO (the Ledger's admission)."""
        raise NotImplementedError

    def request_abort(
        self, submission_id: str, reason: str | None = None, *, subject: str | None = None
    ) -> Submission:
        """Make an abort intent durable at once; settle now unless an Attempt is running.

        A running Attempt observes the intent at its next step boundary (or its settlement);
        if its lease expires first, recovery settles it aborted. Aborting a settled submission
        changes nothing and returns it. Input joined into a running head settles with that
        head: aborting it alone raises :class:`Conflict` (abort the head instead), and the
        head's abort settles it aborted too. ``subject`` names who asked (the intent's
        ``requested_by``, the settlement record's ``aborted_by``); the first request kept is
        the one that counts.
        """
        reason = check_abort_reason(reason)
        subject = check_subject(subject)
        return self._abort(submission_id, reason, subject)

    def _abort(
        self,
        submission_id: str,
        reason: str | None,
        subject: str | None,
        resolving: waits.Wait | None = None,
    ) -> Submission:
        """:meth:`request_abort`, checked; ``resolving`` is the Unknown Outcome an abort
        resolution resolves in the same transaction (its wait keeps the decision and who made
        it, and the settlement record names them as ``resolved_by``)."""
        try:
            current = self.get(submission_id)
        except NotFound:
            waiting = delayed.get(self.storage, submission_id)
            if waiting is None:
                raise
            return self._abort_scheduled(waiting.submission, reason, subject)
        if current.state is SubmissionState.SETTLED:
            return current
        if current.state is SubmissionState.JOINED:
            raise Conflict(
                f"submission {submission_id!r} was joined into {current.joined_to!r} as"
                " follow-up input and settles with it: abort that submission instead",
                field="submission",
            )

        def write() -> Submission:
            now = self.clock.now_ms()
            self.aborts.requested()
            self.storage.exec(_ACCEPT_INTENT, submission_id, reason, now, subject)
            if resolving is not None and not waits.resolve(
                self.storage, resolving.id, now=now, decided_by=subject,
                decision_json=encode_json({"action": Resolution.ABORT.value, "result": None}),
            ):
                raise Conflict("the unknown outcome changed while it was being resolved")
            if current.state in _ABORT_AT_ONCE and not transitions.settle(
                self.storage,
                submission_id,
                thread_id=current.thread_id,
                state=current.state,
                revision=current.revision,
                outcome=Outcome.ABORTED,
                now=now,
                error=transitions.aborted_error(reason),
                resolved_by=None if resolving is None else subject,
            ):
                raise Conflict("the submission changed while it was being aborted")
            return self.get(submission_id)

        return commit_fact(self.gate, write, (NATIVE, PUBLICATION), thread=current.thread_id)

    def _abort_scheduled(
        self, scheduled: ScheduledSubmission, reason: str | None, subject: str | None
    ) -> Submission:
        """Abort a submission that has not fallen due: it settles ``aborted`` at once.

        It is admitted and settled in one transaction (so its id answers like any settled
        submission's, with its abort intent): it takes its Thread's next seq, already
        settled, holding nothing up. Should the lane admit it first, the abort is that of a
        queued submission.
        """

        def write() -> Submission | None:
            now = self.clock.now_ms()
            row = delayed.get(self.storage, scheduled.id)
            if row is None or not self._admit_delayed(row, now):
                return None
            self.aborts.requested()
            self.storage.exec(_ACCEPT_INTENT, scheduled.id, reason, now, subject)
            if not transitions.settle(
                self.storage, scheduled.id, thread_id=scheduled.thread_id,
                state=SubmissionState.QUEUED, revision=0, outcome=Outcome.ABORTED, now=now,
                error=transitions.aborted_error(reason),
            ):
                raise Conflict("the submission changed while it was being aborted")
            return self.get(scheduled.id)

        # Settled on arrival: no native work, only a settlement to publish.
        aborted = commit_fact(self.gate, write, (PUBLICATION,), thread=scheduled.thread_id)
        return aborted if aborted is not None else self._abort(scheduled.id, reason, subject)

    def decide_approval(
        self,
        submission_id: str,
        key: str,
        *,
        approved: bool,
        payload: JsonValue = None,
        subject: str | None = None,
    ) -> ApprovalDecision:
        """Decide an open approval; the submission becomes ready once nothing else is open.

        Deciding again with the same decision returns it; a different decision raises
        :class:`Conflict`. ``subject`` names who decided: kept on the wait (``decided_by``)
        and in the ``approval.decided`` record written with the decision.
        """
        subject = check_subject(subject)
        decision = ApprovalDecision(bool(approved), payload)
        self._check_value(payload, field="payload")
        decision_json = encode_json({"approved": decision.approved, "payload": payload},
                                    field="payload", max_depth=None)
        wait = waits.find(self.storage, submission_id, WaitKind.APPROVAL, key)
        if wait is None:
            raise NotFound(f"submission {submission_id!r} awaits no approval {key!r}",
                           field="key")
        if wait.state is not WaitState.OPEN:
            if (wait.decision is not None
                    and encode_json(wait.decision, max_depth=None) == decision_json):
                return decision
            raise Conflict(f"approval {key!r} was already {wait.state.value}", field="key")
        current = self.get(submission_id)

        def write() -> ApprovalDecision:
            now = self.clock.now_ms()
            if not waits.resolve(self.storage, wait.id, decision_json=decision_json, now=now,
                                 decided_by=subject):
                raise Conflict(f"approval {key!r} changed while it was being decided")
            body: dict[str, JsonValue] = {"submission_id": submission_id, "key": key,
                                          "approved": decision.approved}
            if subject is not None:
                body["decided_by"] = subject
            # Under the wait's compare-and-set: a decision delivered twice is logged once.
            history.append_history(
                self.storage, record_id=f"{submission_id}:approval:{key}:decided",
                thread_id=current.thread_id, submission_id=submission_id,
                kind=APPROVAL_DECIDED, body_json=encode_json(body, max_depth=None), now=now)
            self._wake_if_unblocked(current, now)
            return decision

        return commit_fact(self.gate, write, thread=current.thread_id)

    def resolve_unknown(
        self,
        submission_id: str,
        action: Resolution | str,
        result: JsonValue = None,
        *,
        subject: str | None = None,
    ) -> Submission:
        """Resolve an Unknown Outcome: ``retry`` the step, ``accept`` a result for it, or
        ``abort`` the submission.

        Only a submission in ``unknown`` can be resolved; anything else raises
        :class:`Conflict`, so a resolution delivered twice changes the ledger once.
        ``subject`` names who resolved it: kept on the wait (``decided_by``); an abort also
        keeps it on its intent and names it in the settlement record (``aborted_by``,
        ``resolved_by``).
        """
        action = check_resolution(action)
        subject = check_subject(subject)
        current = self.get(submission_id)
        if current.state is not SubmissionState.UNKNOWN:
            raise Conflict(f"submission {submission_id!r} is {current.state.value}, not unknown")
        pending = [w for w in waits.open_waits(self.storage, submission_id)
                   if w.kind is WaitKind.UNKNOWN]
        if not pending:
            raise Conflict(f"submission {submission_id!r} has no open unknown outcome")
        wait = pending[0]
        step_key = wait.payload["step"]
        if action is Resolution.ABORT:
            return self._abort(submission_id, "unknown outcome resolved by abort", subject,
                               resolving=wait)
        value_json = (self._check_value(result, field="result")
                      if action is Resolution.ACCEPT else None)

        def write() -> Submission:
            now = self.clock.now_ms()
            decision = {"action": action.value, "result": result}
            if not waits.resolve(self.storage, wait.id,
                                 decision_json=encode_json(decision, max_depth=None), now=now,
                                 decided_by=subject):
                raise Conflict("the unknown outcome changed while it was being resolved")
            if action is Resolution.ACCEPT:
                journal.resolve_started(self.storage, submission_id, step_key,
                                        state=StepState.FINISHED, value_json=value_json, now=now)
            else:
                journal.resolve_started(
                    self.storage, submission_id, step_key, state=StepState.FAILED, now=now,
                    error_json=encode_json({"type": "UnknownOutcome", "resolution": "retry"}),
                )
            self._wake_if_unblocked(current, now)
            return self.get(submission_id)

        return commit_fact(self.gate, write, thread=current.thread_id)

    def _check_value(self, value: JsonValue, *, field: str) -> str:
        """``value`` as JSON within ``max_json_depth`` and ``max_value_bytes``."""
        return encode_json(value, field=field, max_depth=self.config.max_json_depth,
                           max_bytes=self.config.max_value_bytes)

    def _wake_if_unblocked(self, current: Submission, now: int) -> None:
        """``suspended|unknown -> ready`` once the submission has no open wait left."""
        if current.state not in (SubmissionState.SUSPENDED, SubmissionState.UNKNOWN):
            return
        if waits.open_waits(self.storage, current.id):
            return
        if not transitions.move(self.storage, current.id, state=current.state,
                                revision=current.revision, to=SubmissionState.READY, now=now,
                                thread_id=current.thread_id):
            raise Conflict("the submission changed while its wait was being resolved")


def check_abort_reason(reason: object) -> str | None:
    """An abort's reason: None, or text of at most ``MAX_ABORT_REASON_CHARS`` characters.

    Anything else (a dict, a number, text with a lone surrogate, too long) raises
    :class:`ValidationFailed` before anything is read or written.
    """
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise ValidationFailed("reason must be text", field="reason")
    if len(reason) > MAX_ABORT_REASON_CHARS:
        raise ValidationFailed(
            f"reason is longer than {MAX_ABORT_REASON_CHARS} characters", field="reason"
        )
    encode_json(reason, field="reason")  # it must have a UTF-8 form to be stored
    return reason


def check_resolution(action: str) -> Resolution:
    """Parse an Unknown Outcome resolution; anything else raises :class:`ValidationFailed`."""
    try:
        return Resolution(action)
    except ValueError as exc:
        raise ValidationFailed("action must be retry, accept or abort", field="action") from exc



__all__ = [
    "MAX_ABORT_REASON_CHARS",
    "OperatorDecisions",
    "check_abort_reason",
    "check_resolution",
]
