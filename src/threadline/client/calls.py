"""The requests both clients make, each built once as a :class:`_Call`: a path, a query, a
body and the model its success parses into, so the blocking and asynchronous twins cannot drift
apart on any of them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from threadline.api.models import (
    ApprovalView,
    HistoryPage,
    LaneView,
    MaintenanceView,
    RevocationList,
    RevocationView,
    ScheduleList,
    SubmissionDetail,
    SubmissionView,
    SubscriberSkip,
    SubscriberView,
    ThreadPage,
    ThreadSummary,
)

M = TypeVar("M", bound=BaseModel)

#: The default of an argument that may be given as None.
_UNSET: Any = object()


def _path(*parts: str) -> str:
    return "/v1/spaces/" + "/".join(quote(part, safe="") for part in parts)


def _thread(space: str, thread: str) -> str:
    return _path(space, "threads", thread)


def _submission(space: str, thread: str, submission_id: str) -> str:
    return _path(space, "threads", thread, "submissions", submission_id)


def _submit_body(
    input: Any, agent: str | None, idempotency_key: str | None, not_before: datetime | int | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"input": input}
    if agent is not None:
        body["agent"] = agent
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    if isinstance(not_before, datetime):
        # A naive datetime goes out without an offset, and the API refuses it (422).
        body["not_before"] = not_before.isoformat()
    elif not_before is not None:
        body["not_before"] = not_before
    return body


def _resolve_body(action: str, result: Any) -> dict[str, Any]:
    return {"action": action} if result is _UNSET else {"action": action, "result": result}


@dataclass(frozen=True)
class _Call(Generic[M]):
    """One API request and the model its success parses into.

    Both clients build their requests here, so the blocking and asynchronous twins cannot
    drift apart on a path, a parameter or a body; each only sends the call its own way.
    """

    method: str
    url: str
    model: type[M]
    params: dict[str, Any] | None = None
    json: Any = None


def _submit_call(
    space: str, thread: str, input: Any, agent: str | None, idempotency_key: str | None,
    not_before: datetime | int | None,
) -> _Call[SubmissionView]:
    return _Call("POST", _thread(space, thread) + "/submissions", SubmissionView,
                 json=_submit_body(input, agent, idempotency_key, not_before))


def _get_submission_call(space: str, thread: str, submission_id: str) -> _Call[SubmissionDetail]:
    return _Call("GET", _submission(space, thread, submission_id), SubmissionDetail)


def _threads_call(space: str, after: str | None, limit: int) -> _Call[ThreadPage]:
    params: dict[str, Any] = {"limit": limit}
    if after is not None:
        params["after"] = after
    return _Call("GET", _path(space, "threads"), ThreadPage, params=params)


def _thread_call(space: str, thread: str) -> _Call[ThreadSummary]:
    return _Call("GET", _thread(space, thread), ThreadSummary)


def _history_call(space: str, thread: str, after: int, limit: int) -> _Call[HistoryPage]:
    return _Call("GET", _thread(space, thread) + "/history", HistoryPage,
                 params={"after": after, "limit": limit})


def _approve_call(
    space: str, thread: str, submission_id: str, key: str, approved: bool, payload: Any
) -> _Call[ApprovalView]:
    path = _submission(space, thread, submission_id) + "/approvals/" + quote(key, safe="")
    return _Call("POST", path, ApprovalView, json={"approved": approved, "payload": payload})


def _abort_call(
    space: str, thread: str, submission_id: str, reason: str | None
) -> _Call[SubmissionDetail]:
    body = {} if reason is None else {"reason": reason}
    return _Call("POST", _submission(space, thread, submission_id) + "/abort", SubmissionDetail,
                 json=body)


def _resolve_call(
    space: str, thread: str, submission_id: str, action: str, result: Any
) -> _Call[SubmissionDetail]:
    return _Call("POST", _submission(space, thread, submission_id) + "/resolve",
                 SubmissionDetail, json=_resolve_body(action, result))


def _schedules_call(space: str) -> _Call[ScheduleList]:
    return _Call("GET", _path(space, "schedules"), ScheduleList)


def _maintenance_call(space: str) -> _Call[MaintenanceView]:
    return _Call("GET", _path(space, "maintenance"), MaintenanceView)


def _subscriber_call(
    space: str, name: str, action: str, body: dict[str, Any] | None = None
) -> _Call[SubscriberView]:
    return _Call("POST", _path(space, "subscribers", name, action), SubscriberView, json=body)


def _skip_call(
    space: str, name: str, cursor: int, record_id: str | None
) -> _Call[SubscriberSkip]:
    body: dict[str, Any] = {"cursor": cursor}
    if record_id is not None:
        body["record_id"] = record_id
    return _Call("POST", _path(space, "subscribers", name, "skip"), SubscriberSkip, json=body)


def _retry_lane_call(space: str, lane: str) -> _Call[LaneView]:
    return _Call("POST", _path(space, "lanes", lane, "retry"), LaneView)


def _revoke_call(space: str, body: dict[str, Any]) -> _Call[RevocationView]:
    return _Call("POST", _path(space, "revocations"), RevocationView,
                 json={k: v for k, v in body.items() if v is not None})


def _revocations_call(space: str) -> _Call[RevocationList]:
    return _Call("GET", _path(space, "revocations"), RevocationList)


def _issued_before(value: datetime | int | None) -> str | int | None:
    return value.isoformat() if isinstance(value, datetime) else value
