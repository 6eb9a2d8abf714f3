"""Submission routes: submit, read, abort, decide an approval, resolve an Unknown Outcome.

Each mutating route validates everything it can before the ledger's one transaction, so a
refused request writes nothing; after a committed change that can make work runnable it asks
the scheduler for a prompt pass (``ctx.wake``), a droppable hint on top of the crash-fallback
alarm that the transaction already armed.

Each mutating route records who caused what it does: the subject the Worker names in the
``threadline-subject`` header (:data:`threadline.access.SUBJECT_HEADER`) of the request it
forwards, None when absent. Only the Worker sets that header (it drops any a client sends), so
an invalid one is a fault upstream: refused with 400 ``invalid-header`` before anything is read
or written, rather than recorded or silently dropped.
"""

from __future__ import annotations

from threadline.access import SUBJECT_HEADER
from threadline.api.body import read_body
from threadline.api.context import ApiContext
from threadline.api.http import Request, Response, model_response
from threadline.api.models import (
    AbortRequest,
    ApprovalRequest,
    ApprovalView,
    ResolveRequest,
    SubmitRequest,
)
from threadline.api.problems import InvalidHeader
from threadline.api.views import submission_detail, submission_view
from threadline.errors import Conflict, NotFound, ValidationFailed
from threadline.threads import agent_choice
from threadline.threads.model import (
    SCHEDULED,
    ScheduledSubmission,
    Submission,
    SubmissionState,
    check_subject,
)


def submission_location(space: str, thread: str, submission_id: str) -> str:
    """The path of a submission's resource."""
    return f"/v1/spaces/{space}/threads/{thread}/submissions/{submission_id}"


def request_subject(request: Request) -> str | None:
    """The subject of the principal the request comes from, as the Worker names it; None
    when it names none. An invalid one raises :class:`InvalidHeader` (400)."""
    value = request.header(SUBJECT_HEADER)
    try:
        return check_subject(value, field=SUBJECT_HEADER)
    except ValidationFailed as exc:
        raise InvalidHeader(exc.message, field=SUBJECT_HEADER) from None


def owned(ctx: ApiContext, thread: str, submission_id: str) -> Submission | ScheduledSubmission:
    """The submission (admitted or still scheduled) if it belongs to ``thread``; 404
    otherwise, in the same words whether it is missing or another Thread's: a principal
    scoped to one Thread learns nothing of the others' submissions."""
    try:
        submission: Submission | ScheduledSubmission | None = ctx.ledger.find(submission_id)
    except NotFound:
        submission = None
    if submission is None or submission.thread_id != thread:
        raise NotFound(f"no submission {submission_id!r} in thread {thread!r}",
                       field="submission")
    return submission


def admitted(ctx: ApiContext, thread: str, submission_id: str) -> Submission:
    """The submission if it belongs to ``thread`` and took its place in the FIFO; a
    scheduled one is a 409 (nothing of it ran: it has no approval or outcome to decide)."""
    submission = owned(ctx, thread, submission_id)
    if isinstance(submission, ScheduledSubmission):
        raise Conflict(f"submission {submission_id!r} is scheduled until"
                       f" {submission.not_before} and has not run")
    return submission


async def submit(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../threads/{thread}/submissions``: 202 when admitted, 200 on an exact replay."""
    thread = params["thread"]
    subject = request_subject(request)
    body = read_body(request, SubmitRequest)
    agent = agent_choice.choose_agent(ctx.storage, ctx.agents, thread, body.agent,
                                      body.idempotency_key)
    ctx.agents.check_input(agent, body.input)
    admission = ctx.ledger.admit(thread, agent, body.input, body.idempotency_key,
                                 not_before=body.due_ms, subject=subject)
    view = submission_view(admission.submission)
    location = {"location": submission_location(params["space"], thread, view.id)}
    if not admission.created:
        return model_response(200, view, headers=location)
    if not isinstance(admission.submission, ScheduledSubmission):
        # The admission committed with its alarm a minimum delay away; this asks for sooner.
        # Its commit made the native lane due when it was written: no queue read is needed.
        ctx.wake(due=admission.submission.created_at)
    return model_response(202, view, headers=location)


async def get_submission(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``GET .../submissions/{submission}``: state, attempts, outcome, waits, journal."""
    submission = owned(ctx, params["thread"], params["submission"])
    return model_response(200, submission_detail(ctx.storage, ctx.ledger, submission))


async def abort(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../submissions/{submission}/abort``: the intent is durable at once."""
    subject = request_subject(request)
    body = read_body(request, AbortRequest)
    before = owned(ctx, params["thread"], params["submission"])
    after = ctx.ledger.request_abort(before.id, body.reason, subject=subject)
    if before.state not in (SubmissionState.SETTLED, SCHEDULED):
        ctx.wake()
    return model_response(200, submission_detail(ctx.storage, ctx.ledger, after))


async def approve(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../submissions/{submission}/approvals/{key}``: decide an open approval."""
    subject = request_subject(request)
    body = read_body(request, ApprovalRequest)
    submission = admitted(ctx, params["thread"], params["submission"])
    decision = ctx.ledger.decide_approval(
        submission.id, params["key"], approved=body.approved, payload=body.payload,
        subject=subject,
    )
    ctx.wake()
    after = ctx.ledger.get(submission.id)
    view = ApprovalView(
        submission_id=submission.id, key=params["key"], approved=decision.approved,
        payload=decision.payload, state=after.state.value,
    )
    return model_response(200, view)


async def resolve(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../submissions/{submission}/resolve``: retry, accept a result, or abort."""
    subject = request_subject(request)
    body = read_body(request, ResolveRequest)
    given = "result" in body.model_fields_set
    if body.action == "accept" and not given:
        raise ValidationFailed("result is required with action accept", field="result")
    if body.action != "accept" and given:
        raise ValidationFailed(f"result is not allowed with action {body.action}",
                               field="result")
    submission = admitted(ctx, params["thread"], params["submission"])
    after = ctx.ledger.resolve_unknown(submission.id, body.action, body.result,
                                       subject=subject)
    ctx.wake()
    return model_response(200, submission_detail(ctx.storage, ctx.ledger, after))


__all__ = [
    "abort",
    "admitted",
    "approve",
    "get_submission",
    "owned",
    "request_subject",
    "resolve",
    "submission_location",
    "submit",
]
