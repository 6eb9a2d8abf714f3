"""The object's route table, and :func:`route`, which answers one request over it.

The Worker has already checked the token, the ids and the body size (``api/edge.py``); the
object checks ids and size again, so the simulated object and direct callers get the same
answers. Every refusal is a problem response and writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from threadline.access import Capability
from threadline.api import events, operators, revocations, submissions, threads
from threadline.api import maintenance as maintenance_routes
from threadline.api.context import ApiContext
from threadline.api.http import Request, Response, json_response, model_response
from threadline.api.models import (
    AbortRequest,
    ApprovalRequest,
    ApprovalView,
    EventsQuery,
    Health,
    HistoryPage,
    HistoryQuery,
    LaneView,
    MaintenanceView,
    ResolveRequest,
    RestartRequest,
    RevocationList,
    RevocationView,
    RevokeRequest,
    ScheduleList,
    SkipRequest,
    SubmissionDetail,
    SubmissionView,
    SubmitRequest,
    SubscriberSkip,
    SubscriberView,
    ThreadPage,
    ThreadsQuery,
    ThreadSummary,
)
from threadline.api.openapi import build_document, with_agents
from threadline.api.problems import (
    internal_error,
    method_not_allowed,
    not_found,
    problem_from_error,
    typed_problem,
)
from threadline.api.router import Route, Router, check_path_id
from threadline.api.tokens import TokenGrant, TokenRequest
from threadline.errors import ApiError, NotFound

HEALTH_PATH = "/v1/health"
TOKENS_PATH = "/v1/tokens"
OPENAPI_PATH = "/v1/openapi.json"
_SPACE = "/v1/spaces/{space}"
_THREAD = _SPACE + "/threads/{thread}"
_SUBMISSION = _THREAD + "/submissions/{submission}"
_SUBSCRIBER = _SPACE + "/subscribers/{subscriber}"

#: How the read routes answer for a Thread nothing was admitted to yet.
_NAMED = (
    "A Thread exists for reading once it is named: before its first submission its summary "
    "is empty (zero counts, null `created_at` and `updated_at`) and its history an empty "
    "page. Reading writes nothing."
)

#: What every operator action promises.
_OPERATOR = (
    "One transaction with the lanes it feeds and the alarm: a refusal (404 unknown, 409 not"
    " stopped or stale, 422 bad position) writes nothing. The principal's subject is logged"
    " with the action."
)

_log = logging.getLogger("threadline.api")


async def _health(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    return model_response(200, Health(status="ok", schema_version=ctx.schema_version()))


_document: dict[str, Any] = {}


async def _tokens(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    # The Worker answers this route itself (it holds the signing keys); an object reached
    # directly has nothing to mint with.
    raise NotFound("tokens are minted by the Worker, not by a space's object")


async def _openapi(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    if not _document:
        _document.update(build_document(ROUTES))
    return json_response(200, with_agents(_document, ctx.agents))


ROUTES: list[Route] = [
    Route("GET", HEALTH_PATH, _health, "health", "The object is up and migrated.",
          {200: (Health, "Healthy.")}, capability=None),
    Route("GET", OPENAPI_PATH, _openapi, "openapi", "This document.",
          {200: (None, "The OpenAPI 3.1 document.")}, capability=None),
    Route("POST", TOKENS_PATH, _tokens, "mintToken",
          "Mint a scoped token (answered by the Worker; needs `admin`).",
          {201: (TokenGrant, "The token and what it opens.")}, body=TokenRequest,
          problems=(403,), capability=Capability.ADMIN,
          description=(
              "A principal mints only within its own reach: its space and Thread, its"
              " capabilities, for at most seven days. Needs `THREADLINE_SIGNING_KEYS`.")),
    Route("GET", _SPACE + "/threads", threads.list_threads, "listThreads",
          "Threads of the space in id order, paged.",
          {200: (ThreadPage, "A page of Threads.")}, query=ThreadsQuery),
    Route("GET", _THREAD, threads.get_thread, "getThread",
          "A Thread and its open submissions.", {200: (ThreadSummary, "The Thread.")},
          description=_NAMED),
    Route("GET", _THREAD + "/history", threads.history, "getHistory",
          "A Thread's canonical records, paged by seq.",
          {200: (HistoryPage, "A page of records.")}, query=HistoryQuery, description=_NAMED),
    Route("GET", _THREAD + "/events", events.events, "streamEvents",
          "A Thread's records and submission state changes, live (Server-Sent Events).",
          {200: (None, "An endless text/event-stream (see the operation's description).")},
          query=EventsQuery, media_type=events.EVENT_STREAM, query_token=True,
          problems=(429, 503),
          headers=(("Last-Event-ID", "Resume after this history seq (wins over `after`)."),),
          description=events.STREAM_DESCRIPTION),
    Route("POST", _THREAD + "/submissions", submissions.submit, "submit",
          "Submit input to a Thread (FIFO behind its earlier submissions).",
          {202: (SubmissionView, "Admitted."),
           200: (SubmissionView, "Replayed: the key was already used with this input.")},
          body=SubmitRequest, problems=(409,), location=True, capability=Capability.SUBMIT),
    Route("GET", _SUBMISSION, submissions.get_submission, "getSubmission",
          "A submission: state, attempts, outcome, waits, journal summary and the messages"
          " it sent.",
          {200: (SubmissionDetail, "The submission.")}),
    Route("POST", _SUBMISSION + "/abort", submissions.abort, "abortSubmission",
          "Abort a submission (durable at once; a running Attempt stops at a step boundary).",
          {200: (SubmissionDetail, "The submission after the abort request.")},
          body=AbortRequest, problems=(409,), capability=Capability.ABORT),
    Route("POST", _SUBMISSION + "/approvals/{key}", submissions.approve, "decideApproval",
          "Decide an approval the submission waits for.",
          {200: (ApprovalView, "The decision.")}, body=ApprovalRequest, problems=(409,),
          capability=Capability.DECIDE),
    Route("POST", _SUBMISSION + "/resolve", submissions.resolve, "resolveUnknown",
          "Resolve an Unknown Outcome: retry the step, accept a result, or abort.",
          {200: (SubmissionDetail, "The submission after the resolution.")},
          body=ResolveRequest, problems=(409,), capability=Capability.DECIDE),
    Route("GET", _SPACE + "/maintenance", maintenance_routes.maintenance, "getMaintenance",
          "Lanes, generation record, alarm, faults, binding waits, recent pass reports,"
          " schedules and host lanes.",
          {200: (MaintenanceView, "The maintenance report.")}, capability=Capability.ADMIN),
    Route("GET", _SPACE + "/schedules", maintenance_routes.schedules, "listSchedules",
          "The schedules the deployment declares: next and last fire, last error, state.",
          {200: (ScheduleList, "The schedules, by id.")}, capability=Capability.ADMIN),
    Route("POST", _SUBSCRIBER + "/resume", operators.resume, "resumeSubscriber",
          "Resume a parked or backing-off subscriber from its cursor.",
          {200: (SubscriberView, "The subscriber, delivering again.")}, problems=(409,),
          capability=Capability.ADMIN, description=(
              "Clears the parking and the failure streak and makes the publication lane due"
              " now; nothing is replayed. 409 when it is neither parked nor backing off (a"
              " repeated resume). " + _OPERATOR)),
    Route("POST", _SUBSCRIBER + "/skip", operators.skip, "skipSubscriberRecord",
          "Move a parked or backing-off subscriber past the one record at its cursor, and"
          " resume it.",
          {200: (SubscriberSkip, "The subscriber and the record it skipped.")},
          body=SkipRequest, problems=(409,), capability=Capability.ADMIN, description=(
              "The record skipped is the first the subscriber wants past its cursor (the one"
              " its failed batch began with). A compare-and-set on `cursor`: a repeated or"
              " stale request is a 409 naming the current cursor (`current`). The skip is"
              " appended to the record's Thread log as a `subscriber.skipped` record naming"
              " it and who skipped it (`skipped_by`). " + _OPERATOR)),
    Route("POST", _SUBSCRIBER + "/restart", operators.restart, "restartSubscriber",
          "Deliver from a given position of the space's log.",
          {200: (SubscriberView, "The subscriber, delivering from there.")},
          body=RestartRequest, capability=Capability.ADMIN, description=(
              "`position` is from 0 (the log again from its beginning) to the log's end"
              " (`log_end`: only what comes next); parking and failures are cleared, its"
              " version is kept. Restarting at the position it is at changes nothing. "
              + _OPERATOR)),
    Route("POST", _SPACE + "/lanes/{lane}/retry", operators.retry_lane, "retryLane",
          "Make a parked lane of the due queue due now, its retry budget refilled.",
          {200: (LaneView, "The lane, due now.")}, problems=(409,),
          capability=Capability.ADMIN, description=(
              "Any parked lane of `/maintenance`'s `lanes`: `threadline:messages`, a host"
              " lane, a schedule's. 409 when it is not parked (a repeated retry). "
              + _OPERATOR)),
    Route("POST", _SPACE + "/revocations", revocations.revoke, "revokeTokens",
          "Revoke one scoped token (and every token minted from it), or every token of one"
          " subject issued before a time, in this space.",
          {201: (RevocationView, "The revocation, in force for the next request.")},
          body=RevokeRequest, problems=(409,), capability=Capability.ADMIN,
          description=(
              "The space's object refuses a revoked token on every route (401, `the token"
              " has been revoked`) from its next request on, after restarts too; an open"
              " event stream made with it ends at its next event or heartbeat. A revocation"
              " is kept until every token it refuses has expired (`kept_until`).")),
    Route("GET", _SPACE + "/revocations", revocations.list_revocations, "listRevocations",
          "The space's revocations in force, oldest first.",
          {200: (RevocationList, "The revocations.")}, capability=Capability.ADMIN),
]

ROUTER = Router(ROUTES)


async def route(ctx: ApiContext, request: Request) -> Response:
    """Answer one request; API errors become problem responses, other failures a bare 500."""
    found = ROUTER.resolve(request.method, request.path)
    if found.route is None:
        if found.allowed:
            return method_not_allowed(request.method, found.allowed)
        return not_found(request.path)
    try:
        for name in found.route.params:
            check_path_id(name, found.params[name])
        if len(request.body) > ctx.config.max_body_bytes:
            return typed_problem(
                "payload-too-large", f"bodies are capped at {ctx.config.max_body_bytes} bytes",
                field="body",
            )
        if found.route.capability is not None and ctx.revocations.refuses(request):
            return revocations.revoked()
        response = await found.route.handler(ctx, request, found.params)
    except ApiError as error:
        return problem_from_error(error)
    except Exception:
        _log.exception("unexpected failure answering %s %s", request.method, request.path)
        return internal_error()
    if request.method == "HEAD":
        if response.stream is not None:
            await _close(response.stream)
        return Response(response.status, response.headers, b"")
    return response


def route_space(request: Request) -> str | None:
    """The ``{space}`` id of the route ``request`` is for (None: a route without one, no
    route, or an id :func:`route` refuses)."""
    found = ROUTER.resolve(request.method, request.path)
    space = found.params.get("space") if found.route is not None else None
    if space is None:
        return None
    try:
        return check_path_id("space", space)
    except ApiError:
        return None


async def _close(stream: AsyncIterator[bytes]) -> None:
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        await closer()


__all__ = ["HEALTH_PATH", "OPENAPI_PATH", "ROUTER", "ROUTES", "TOKENS_PATH", "route", "route_space"]
