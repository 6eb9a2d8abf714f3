"""Response models built from the runtime's values (the only place that maps them)."""

from __future__ import annotations

from threadline.api.models import (
    AbortView,
    FailedAttemptView,
    FailuresView,
    JournalStepView,
    JournalSummary,
    LossesView,
    MessageView,
    OpenSubmission,
    ScheduledItem,
    SubmissionDetail,
    SubmissionView,
    ThreadItem,
    ThreadSummary,
    WaitView,
)
from threadline.storage.port import Storage
from threadline.threads import views
from threadline.threads.ledger import Ledger
from threadline.threads.model import ScheduledSubmission, Submission, WorkItem


def submission_view(submission: Submission | ScheduledSubmission) -> SubmissionView:
    """The public view of a submission (``scheduled`` while a delayed one waits)."""
    return SubmissionView.model_validate(_submission_fields(submission))


def _scheduled_fields(scheduled: ScheduledSubmission) -> dict[str, object]:
    return {
        "id": scheduled.id,
        "thread_id": scheduled.thread_id,
        "seq": None,
        "agent": scheduled.agent,
        "idempotency_key": scheduled.idempotency_key,
        "state": scheduled.state,
        "outcome": None,
        "input": scheduled.input,
        "result": None,
        "error": None,
        "attempts": 0,
        "not_before": scheduled.not_before,
        "lease_expires_at": None,
        "created_at": scheduled.created_at,
        "updated_at": scheduled.created_at,
        "settled_at": None,
        "submitted_by": scheduled.submitted_by,
        "message_from": None,
    }


def _submission_fields(submission: Submission | ScheduledSubmission) -> dict[str, object]:
    if isinstance(submission, ScheduledSubmission):
        return _scheduled_fields(submission)
    return {
        "id": submission.id,
        "thread_id": submission.thread_id,
        "seq": submission.seq,
        "agent": submission.agent,
        "idempotency_key": submission.idempotency_key,
        "state": submission.state.value,
        "outcome": None if submission.outcome is None else submission.outcome.value,
        "input": submission.input,
        "result": submission.result,
        "error": submission.error,
        "attempts": submission.attempts,
        "not_before": submission.not_before,
        "lease_expires_at": submission.lease_expires_at,
        "created_at": submission.created_at,
        "updated_at": submission.updated_at,
        "settled_at": submission.settled_at,
        "submitted_by": submission.submitted_by,
        "message_from": submission.message_from,
    }


def submission_detail(
    storage: Storage, ledger: Ledger, submission: Submission | ScheduledSubmission
) -> SubmissionDetail:
    """A submission with its waits, journal summary, abort intent, failed and lost Attempts
    and messages (four indexed reads besides the submission's row; none for a scheduled one,
    which has none)."""
    if isinstance(submission, ScheduledSubmission):
        return SubmissionDetail.model_validate({
            **_scheduled_fields(submission), "waits": [], "abort": None, "messages": [],
            "journal": JournalSummary(steps=0, finished=0, failed=0, in_flight=0, entries=[]),
            "losses": LossesView(total=0, in_a_row=0, position=None, last_cause=None),
            "failures": FailuresView(total=0, dropped=0, attempts=[]),
            "joined_to": None,
        })
    steps = views.journal_of(storage, submission.id)
    intent = ledger.read_abort_intent(submission.id)
    return SubmissionDetail.model_validate(
        {
            **_submission_fields(submission),
            "waits": [
                WaitView.model_validate(
                    {
                        "kind": wait.kind, "key": wait.key, "state": wait.state,
                        "payload": wait.payload, "decision": wait.decision,
                        "wake_at": wait.wake_at, "created_at": wait.created_at,
                        "resolved_at": wait.resolved_at, "decided_by": wait.decided_by,
                    }
                )
                for wait in views.waits_of(storage, submission.id)
            ],
            "journal": JournalSummary(
                steps=len(steps),
                finished=sum(step.state == "finished" for step in steps),
                failed=sum(step.state == "failed" for step in steps),
                in_flight=sum(step.state == "started" for step in steps),
                entries=[
                    JournalStepView.model_validate(
                        {
                            "key": step.key, "position": step.position, "effect": step.effect,
                            "state": step.state, "attempt": step.attempt,
                            "started_at": step.started_at, "finished_at": step.finished_at,
                        }
                    )
                    for step in steps
                ],
            ),
            "abort": None if intent is None else AbortView.model_validate(
                {
                    "state": intent.state.value, "reason": intent.reason,
                    "requested_at": intent.requested_at, "applied_at": intent.applied_at,
                    "requested_by": intent.requested_by,
                }
            ),
            "losses": LossesView(
                total=submission.losses, in_a_row=submission.loss_streak,
                position=submission.loss_position,
                last_cause=None if submission.loss_cause is None else submission.loss_cause.value,
            ),
            "failures": FailuresView(
                total=submission.failures,
                dropped=submission.failures - len(submission.failed_attempts),
                attempts=[
                    FailedAttemptView(
                        attempt=failed.attempt, type=failed.type, message=failed.message,
                        at=failed.at, final=failed.final, retry_at=failed.retry_at,
                    )
                    for failed in submission.failed_attempts
                ],
            ),
            "joined_to": submission.joined_to,
            "messages": [
                MessageView.model_validate(
                    {
                        "id": sent.id, "to_space": sent.to_space, "to_thread": sent.to_thread,
                        "agent": sent.agent, "state": sent.state, "attempts": sent.attempts,
                        "next_attempt_at": sent.next_attempt_at, "error": sent.last_error,
                        "submission_id": sent.admitted_as, "created_at": sent.created_at,
                        "delivered_at": sent.delivered_at, "failed_at": sent.failed_at,
                    }
                )
                for sent in views.messages_of(storage, submission.id)
            ],
        }
    )


def thread_item(record: views.ThreadRecord) -> ThreadItem:
    """A Thread in the list."""
    return ThreadItem(
        id=record.id, submissions=record.submissions, open_submissions=record.open_submissions,
        history_seq=record.history_seq, created_at=record.created_at,
        updated_at=record.updated_at,
    )


def _scheduled_items(scheduled: list[ScheduledSubmission]) -> list[ScheduledItem]:
    return [
        ScheduledItem(id=item.id, agent=item.agent, state="scheduled",
                      not_before=item.not_before, created_at=item.created_at)
        for item in scheduled
    ]


def empty_thread(
    thread_id: str, scheduled: list[ScheduledSubmission] | None = None
) -> ThreadSummary:
    """A named Thread nothing was admitted to yet: no row stands behind it (its delayed
    submissions, if any, wait for their due time)."""
    return ThreadSummary(
        id=thread_id, submissions=0, open_submissions=0, history_seq=0, created_at=None,
        updated_at=None, open=[], scheduled=_scheduled_items(scheduled or []),
    )


def thread_summary(
    record: views.ThreadRecord,
    open_items: list[WorkItem],
    scheduled: list[ScheduledSubmission] | None = None,
) -> ThreadSummary:
    """A Thread with its open submissions and those scheduled for later."""
    return ThreadSummary.model_validate(
        {
            **thread_item(record).model_dump(),
            "scheduled": _scheduled_items(scheduled or []),
            "open": [
                OpenSubmission.model_validate(
                    {
                        "id": item.submission_id, "seq": item.seq, "agent": item.agent,
                        "state": item.state.value, "attempts": item.attempts,
                        "not_before": item.not_before,
                        "lease_expires_at": item.lease_expires_at,
                    }
                )
                for item in open_items
            ],
        }
    )


__all__ = [
    "empty_thread", "submission_detail", "submission_view", "thread_item", "thread_summary",
]
