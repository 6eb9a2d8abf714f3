"""A Python client for the thread API (``pip install threadline[client]``; needs httpx).

For your own services, not for the Worker: nothing in the Worker imports this module.
Responses come back as the API's own models; refusals raise the library's errors
(:class:`~threadline.errors.ValidationFailed`, :class:`~threadline.errors.NotFound`,
:class:`~threadline.errors.Conflict`...) carrying the HTTP ``status``, the offending ``field``
and the whole problem document in ``error.extra["problem"]``::

    from threadline.client import Client

    with Client("http://127.0.0.1:8787", token="dev-token-change-me-0123456789abcdef") as client:
        sub = client.submit("demo", "t1", {"text": "hi"}, agent="echo")
        done = client.wait("demo", "t1", sub.id, timeout=10)
        print(done.result)
        for event in client.events("demo", "t1"):   # resumes by itself after a disconnect
            print(event.kind, event.seq, event.data)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from threadline.api.models import (
    ApprovalView,
    HistoryPage,
    LaneView,
    MaintenanceView,
    RevocationView,
    ScheduleView,
    SubmissionDetail,
    SubmissionView,
    SubscriberSkip,
    SubscriberView,
    ThreadPage,
    ThreadSummary,
)
from threadline.client.calls import (
    _UNSET,
    _abort_call,
    _approve_call,
    _Call,
    _get_submission_call,
    _history_call,
    _issued_before,
    _maintenance_call,
    _resolve_call,
    _retry_lane_call,
    _revocations_call,
    _revoke_call,
    _schedules_call,
    _skip_call,
    _submit_call,
    _subscriber_call,
    _thread,
    _thread_call,
    _threads_call,
)
from threadline.client.event_stream import ThreadEvent, aiter_events, iter_events
from threadline.errors import (
    ApiError,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    ValidationFailed,
)

M = TypeVar("M", bound=BaseModel)

_ERRORS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
}


class WaitTimeout(TimeoutError):
    """:meth:`Client.wait` gave up before the submission settled."""


def raise_for_problem(response: httpx.Response) -> None:
    """Raise the library's error for a refused request; do nothing for a success."""
    if response.status_code < 400:
        return
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    message = str(problem.get("detail") or problem.get("title") or response.reason_phrase)
    field = problem.get("field")
    status = response.status_code
    error: ApiError
    if status in (400, 422):
        error = ValidationFailed(message, field=field, status=status, problem=problem)
    elif status in _ERRORS:
        error = _ERRORS[status](message, field=field, problem=problem)
    else:
        error = ApiError(message, field=field, problem=problem)
        error.status = status
    raise error


def _parse(model: type[M], response: httpx.Response) -> M:
    raise_for_problem(response)
    return model.model_validate(response.json())


def _headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def _settled(
    current: SubmissionDetail, submission_id: str, deadline: float,
    monotonic: Callable[[], float],
) -> bool:
    """Whether a wait is over; raise :class:`WaitTimeout` once ``deadline`` has passed."""
    if current.state == "settled":
        return True
    if monotonic() >= deadline:
        raise WaitTimeout(f"submission {submission_id} is still {current.state}")
    return False


class Client:
    """A blocking client. ``transport`` lets tests route requests without a network."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(token), timeout=timeout, transport=transport
        )
        self._sleep = sleep
        self._monotonic = monotonic

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _send(self, call: _Call[M]) -> M:
        return _parse(call.model, self._http.request(
            call.method, call.url, params=call.params, json=call.json))

    def submit(
        self,
        space: str,
        thread: str,
        input: Any,
        *,
        agent: str | None = None,
        idempotency_key: str | None = None,
        not_before: datetime | int | None = None,
    ) -> SubmissionView:
        """Submit input to a Thread; an exact replay of an idempotency key returns the first.

        ``not_before`` (an aware ``datetime``, or epoch milliseconds) delays it: until then it
        is ``scheduled`` (``seq`` None) and input submitted meanwhile goes ahead of it; when
        it falls due it takes its place in the Thread's FIFO. A time in the past admits at
        once; a naive datetime, or one more than 366 days ahead, is refused (422).
        """
        return self._send(
            _submit_call(space, thread, input, agent, idempotency_key, not_before))

    def get_submission(self, space: str, thread: str, submission_id: str) -> SubmissionDetail:
        """A submission with its waits, journal summary and abort intent."""
        return self._send(_get_submission_call(space, thread, submission_id))

    def wait(
        self,
        space: str,
        thread: str,
        submission_id: str,
        *,
        timeout: float,
        interval: float = 0.2,
    ) -> SubmissionDetail:
        """Poll until the submission settles; raise :class:`WaitTimeout` after ``timeout`` s."""
        deadline = self._monotonic() + timeout
        while True:
            current = self.get_submission(space, thread, submission_id)
            if _settled(current, submission_id, deadline, self._monotonic):
                return current
            self._sleep(interval)

    def threads(self, space: str, *, after: str | None = None, limit: int = 100) -> ThreadPage:
        """A page of the space's Threads."""
        return self._send(_threads_call(space, after, limit))

    def thread(self, space: str, thread: str) -> ThreadSummary:
        """A Thread and its open submissions (empty before its first submission)."""
        return self._send(_thread_call(space, thread))

    def history(
        self, space: str, thread: str, *, after: int = 0, limit: int = 100
    ) -> HistoryPage:
        """A page of the Thread's log after seq ``after`` (empty at first): emitted records and
        the runtime's (``submission.settled``, ``approval.requested``, ``approval.decided``,
        ``message.failed``, ``subscriber.skipped``)."""
        return self._send(_history_call(space, thread, after, limit))

    def approve(
        self,
        space: str,
        thread: str,
        submission_id: str,
        key: str,
        *,
        approved: bool = True,
        payload: Any = None,
    ) -> ApprovalView:
        """Decide the approval ``key`` that the submission waits for."""
        return self._send(_approve_call(space, thread, submission_id, key, approved, payload))

    def abort(
        self, space: str, thread: str, submission_id: str, *, reason: str | None = None
    ) -> SubmissionDetail:
        """Abort the submission."""
        return self._send(_abort_call(space, thread, submission_id, reason))

    def events(
        self,
        space: str,
        thread: str,
        after: int | None = None,
        *,
        reconnect_delay: float = 1.0,
        max_reconnects: int | None = None,
        max_busy_retries: int = 5,
    ) -> Iterator[ThreadEvent]:
        """The Thread's live events (records after seq ``after``, or all; state changes).

        Records include each submission's ``submission.settled`` record (see
        :class:`~threadline.client.event_stream.ThreadEvent`): following them tells every
        settlement, one missed while disconnected too, where :meth:`wait` polls one submission.

        May be opened before the Thread's first submission: it waits for it, then follows it.
        Never ends on its own: a lost connection is reopened after ``reconnect_delay`` s with
        ``Last-Event-ID`` set to the last record's seq, so records arrive once each, in order.
        ``max_reconnects`` bounds consecutive failed reconnects (None: no bound). A refused
        request raises the library's error, except a busy one: a 429 (this principal holds too
        many streams) or 503 (the space serves all it can) with ``Retry-After`` is waited out
        (through the client's ``sleep``, at most 60 s a time) and asked again, up to
        ``max_busy_retries`` times in a row. Stop by closing the iterator (or breaking out).
        """
        return iter_events(
            self._http, _thread(space, thread) + "/events", after=after,
            check=raise_for_problem, sleep=self._sleep, reconnect_delay=reconnect_delay,
            max_reconnects=max_reconnects, max_busy_retries=max_busy_retries,
        )

    def resolve(
        self, space: str, thread: str, submission_id: str, action: str, result: Any = _UNSET
    ) -> SubmissionDetail:
        """Resolve an Unknown Outcome: ``retry``, ``accept`` (with ``result``) or ``abort``."""
        return self._send(_resolve_call(space, thread, submission_id, action, result))

    def schedules(self, space: str) -> list[ScheduleView]:
        """The space's schedules, by id: declaration, next and last fire, last error, state.

        Reading them starts the space's object, and with it the schedules it declares.
        """
        return self._send(_schedules_call(space)).schedules

    def maintenance(self, space: str) -> MaintenanceView:
        """The space's maintenance report: lanes, subscribers (cursor, state, the refusal
        that parked one), schedules, faults, recent passes. Needs ``admin``."""
        return self._send(_maintenance_call(space))

    def resume_subscriber(self, space: str, name: str) -> SubscriberView:
        """Resume a parked or backing-off subscriber from its cursor (``admin``)."""
        return self._send(_subscriber_call(space, name, "resume"))

    def skip_record(
        self, space: str, name: str, *, cursor: int, record_id: str | None = None
    ) -> SubscriberSkip:
        """Move a stopped subscriber past the one record at ``cursor`` (its cursor as read
        from :meth:`maintenance`) and resume it; logged in the record's Thread (``admin``)."""
        return self._send(_skip_call(space, name, cursor, record_id))

    def restart_subscriber(self, space: str, name: str, *, position: int) -> SubscriberView:
        """Deliver from ``position`` of the space's log, 0 to its end (``admin``)."""
        return self._send(_subscriber_call(space, name, "restart", {"position": position}))

    def retry_lane(self, space: str, lane: str) -> LaneView:
        """Make a parked lane (``threadline:messages``, a host lane) due now (``admin``)."""
        return self._send(_retry_lane_call(space, lane))

    def revoke_token(
        self, space: str, token_id: str, *, reason: str | None = None
    ) -> RevocationView:
        """Revoke one scoped token of ``space`` (its ``token_id``, as minting answered it)
        and every token minted from it; refused from the object's next request on."""
        return self._send(_revoke_call(space, {"token_id": token_id, "reason": reason}))

    def revoke_subject(
        self, space: str, subject: str, *, issued_before: datetime | int | None = None,
        reason: str | None = None,
    ) -> RevocationView:
        """Revoke every token of ``subject`` in ``space`` issued before ``issued_before``
        (an aware datetime or epoch ms; default: now), and every token minted from one."""
        return self._send(_revoke_call(space, {
            "subject": subject, "issued_before": _issued_before(issued_before),
            "reason": reason}))

    def revocations(self, space: str) -> list[RevocationView]:
        """The revocations in force in ``space``, oldest first."""
        return self._send(_revocations_call(space)).revocations


class AsyncClient:
    """The asynchronous twin of :class:`Client`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(token), timeout=timeout, transport=transport
        )
        self._sleep = sleep
        self._monotonic = monotonic

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _send(self, call: _Call[M]) -> M:
        return _parse(call.model, await self._http.request(
            call.method, call.url, params=call.params, json=call.json))

    async def submit(
        self,
        space: str,
        thread: str,
        input: Any,
        *,
        agent: str | None = None,
        idempotency_key: str | None = None,
        not_before: datetime | int | None = None,
    ) -> SubmissionView:
        """See :meth:`Client.submit`."""
        return await self._send(
            _submit_call(space, thread, input, agent, idempotency_key, not_before))

    async def get_submission(
        self, space: str, thread: str, submission_id: str
    ) -> SubmissionDetail:
        """See :meth:`Client.get_submission`."""
        return await self._send(_get_submission_call(space, thread, submission_id))

    async def wait(
        self,
        space: str,
        thread: str,
        submission_id: str,
        *,
        timeout: float,
        interval: float = 0.2,
    ) -> SubmissionDetail:
        """See :meth:`Client.wait`."""
        deadline = self._monotonic() + timeout
        while True:
            current = await self.get_submission(space, thread, submission_id)
            if _settled(current, submission_id, deadline, self._monotonic):
                return current
            await self._sleep(interval)

    async def threads(
        self, space: str, *, after: str | None = None, limit: int = 100
    ) -> ThreadPage:
        """See :meth:`Client.threads`."""
        return await self._send(_threads_call(space, after, limit))

    async def thread(self, space: str, thread: str) -> ThreadSummary:
        """See :meth:`Client.thread`."""
        return await self._send(_thread_call(space, thread))

    async def history(
        self, space: str, thread: str, *, after: int = 0, limit: int = 100
    ) -> HistoryPage:
        """See :meth:`Client.history`."""
        return await self._send(_history_call(space, thread, after, limit))

    async def approve(
        self,
        space: str,
        thread: str,
        submission_id: str,
        key: str,
        *,
        approved: bool = True,
        payload: Any = None,
    ) -> ApprovalView:
        """See :meth:`Client.approve`."""
        return await self._send(
            _approve_call(space, thread, submission_id, key, approved, payload))

    async def abort(
        self, space: str, thread: str, submission_id: str, *, reason: str | None = None
    ) -> SubmissionDetail:
        """See :meth:`Client.abort`."""
        return await self._send(_abort_call(space, thread, submission_id, reason))

    def events(
        self,
        space: str,
        thread: str,
        after: int | None = None,
        *,
        reconnect_delay: float = 1.0,
        max_reconnects: int | None = None,
        max_busy_retries: int = 5,
    ) -> AsyncIterator[ThreadEvent]:
        """See :meth:`Client.events` (iterate with ``async for``; stop with ``aclose()``)."""
        return aiter_events(
            self._http, _thread(space, thread) + "/events", after=after,
            check=raise_for_problem, sleep=self._sleep, reconnect_delay=reconnect_delay,
            max_reconnects=max_reconnects, max_busy_retries=max_busy_retries,
        )

    async def resolve(
        self, space: str, thread: str, submission_id: str, action: str, result: Any = _UNSET
    ) -> SubmissionDetail:
        """See :meth:`Client.resolve`."""
        return await self._send(_resolve_call(space, thread, submission_id, action, result))

    async def schedules(self, space: str) -> list[ScheduleView]:
        """See :meth:`Client.schedules`."""
        return (await self._send(_schedules_call(space))).schedules

    async def maintenance(self, space: str) -> MaintenanceView:
        """See :meth:`Client.maintenance`."""
        return await self._send(_maintenance_call(space))

    async def resume_subscriber(self, space: str, name: str) -> SubscriberView:
        """See :meth:`Client.resume_subscriber`."""
        return await self._send(_subscriber_call(space, name, "resume"))

    async def skip_record(
        self, space: str, name: str, *, cursor: int, record_id: str | None = None
    ) -> SubscriberSkip:
        """See :meth:`Client.skip_record`."""
        return await self._send(_skip_call(space, name, cursor, record_id))

    async def restart_subscriber(
        self, space: str, name: str, *, position: int
    ) -> SubscriberView:
        """See :meth:`Client.restart_subscriber`."""
        return await self._send(
            _subscriber_call(space, name, "restart", {"position": position}))

    async def retry_lane(self, space: str, lane: str) -> LaneView:
        """See :meth:`Client.retry_lane`."""
        return await self._send(_retry_lane_call(space, lane))

    async def revoke_token(
        self, space: str, token_id: str, *, reason: str | None = None
    ) -> RevocationView:
        """See :meth:`Client.revoke_token`."""
        return await self._send(_revoke_call(space, {"token_id": token_id, "reason": reason}))

    async def revoke_subject(
        self, space: str, subject: str, *, issued_before: datetime | int | None = None,
        reason: str | None = None,
    ) -> RevocationView:
        """See :meth:`Client.revoke_subject`."""
        return await self._send(_revoke_call(space, {
            "subject": subject, "issued_before": _issued_before(issued_before),
            "reason": reason}))

    async def revocations(self, space: str) -> list[RevocationView]:
        """See :meth:`Client.revocations`."""
        return (await self._send(_revocations_call(space))).revocations


__all__ = ["AsyncClient", "Client", "ThreadEvent", "WaitTimeout", "raise_for_problem"]
