"""Operator routes: a stopped subscriber resumed, one record skipped, a restart from a position,
and a parked lane retried now (capability ``admin``).

``POST /v1/spaces/{space}/subscribers/{subscriber}/resume``, ``.../skip`` and ``.../restart``
answer the subscriber as ``/maintenance`` shows it after the change; ``POST
/v1/spaces/{space}/lanes/{lane}/retry`` answers the lane. The work is
:class:`~threadline.api.context.OperatorActions`' (the maintenance package's): each action is
one gate transaction, so the alarm is armed with it, and a refusal writes nothing. Each records
who did it, the subject the Worker names (see :func:`~threadline.api.submissions.request_subject`):
a skip in the skipped record's Thread log, every action in the object's log.
"""

from __future__ import annotations

from threadline.api.body import read_body
from threadline.api.context import ApiContext
from threadline.api.http import Request, Response, model_response
from threadline.api.models import (
    LaneView,
    RestartRequest,
    SkipRequest,
    SubscriberSkip,
    SubscriberView,
)
from threadline.api.submissions import request_subject


async def resume(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../subscribers/{subscriber}/resume``: deliver again from the cursor."""
    subject = request_subject(request)
    after = ctx.operators.resume(params["subscriber"], subject=subject)
    ctx.wake()
    return model_response(200, SubscriberView.model_validate(dict(after)))


async def skip(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../subscribers/{subscriber}/skip``: past the one record at the cursor."""
    subject = request_subject(request)
    body = read_body(request, SkipRequest)
    after = ctx.operators.skip(params["subscriber"], cursor=body.cursor,
                               record_id=body.record_id, subject=subject)
    ctx.wake()
    return model_response(200, SubscriberSkip.model_validate(dict(after)))


async def restart(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../subscribers/{subscriber}/restart``: deliver from a position of the log."""
    subject = request_subject(request)
    body = read_body(request, RestartRequest)
    after = ctx.operators.restart(params["subscriber"], position=body.position,
                                  subject=subject)
    ctx.wake()
    return model_response(200, SubscriberView.model_validate(dict(after)))


async def retry_lane(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``POST .../lanes/{lane}/retry``: a parked lane due now."""
    subject = request_subject(request)
    after = ctx.operators.retry_lane(params["lane"], subject=subject)
    ctx.wake()
    return model_response(200, LaneView.model_validate(dict(after)))


__all__ = ["restart", "resume", "retry_lane", "skip"]
