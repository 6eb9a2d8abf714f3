"""The Cloudflare shells: ``WorkerBase`` (the Worker's entrypoint) and ``ThreadObjectBase``.

This module imports the ``workers`` SDK and is imported only by the Worker's entry module;
``import threadline`` never loads it. Both classes only translate between the platform and the
platform-neutral :class:`threadline.space.Space` / :mod:`threadline.api.edge`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import suppress
from http import HTTPMethod
from typing import Any, ClassVar

import js
from pyodide.ffi import create_once_callable, create_proxy, to_js
from workers import DurableObject, Response, WorkerEntrypoint, fetch

from threadline.api import edge
from threadline.api.edge import TOKEN_SECRET
from threadline.api.http import Request
from threadline.api.http import Response as PlainResponse
from threadline.app import Application
from threadline.clock import SystemClock
from threadline.delivery.outbound import (
    RESPONSE_BODY_LIMIT,
    OutboundResponse,
    OutboundTimeout,
    QueueProducer,
    origin,
)
from threadline.fetching import FetchAnswer, FetchRequest
from threadline.maintenance.host_lanes import wake_arguments
from threadline.space import Space
from threadline.storage.cloudflare import CloudflareStorage, is_js_null
from threadline.threads.model import JsonValue
from threadline.threads.routing import MessageEnvelope, Verdict, verdict_from_json, verdict_to_json

_log = logging.getLogger("threadline.worker")


def _js_object(value: dict[str, Any]) -> Any:
    return to_js(value, dict_converter=js.Object.fromEntries)


#: A streamed response whose consumer has taken no chunk for this many heartbeat intervals is
#: closed (see :func:`_readable`); a live client would have read several heartbeats by then.
STALL_HEARTBEATS = 3


def _readable(chunks: AsyncIterator[bytes], stall_s: float | None = None) -> Any:
    """A JS ``ReadableStream`` that pulls ``chunks`` one at a time, as the client reads.

    Pull-based on purpose: the platform asks for the next chunk only when it has sent the last
    one, and calls ``cancel`` when the client goes away, which ends the iterator (its clean-up
    frees the subscriber). A writer-based stream would instead block forever on a write after
    the client left.

    The platform does not always notice a departed client: a chunk it is sending can stay in
    flight for good (seen in workerd behind a Worker hop, after the client closed the
    connection), so neither the next pull nor ``cancel`` ever comes. ``stall_s`` bounds that
    wait: once a chunk has gone unacknowledged (no next pull) that long, the stream is errored
    and the iterator closed. Nothing is lost by it: a client still there reconnects and
    resumes from its last event id.
    """
    pending: list[asyncio.Future[None]] = []
    proxies: list[Any] = []
    # Loop time at which the chunk in flight was handed over (empty once the next pull came),
    # and the one watchdog timer of this stream (re-armed lazily, never one per chunk).
    in_flight: list[float] = []
    watchdog: list[asyncio.TimerHandle] = []
    closing: list[asyncio.Task[None]] = []

    def release() -> None:
        for proxy in proxies:
            proxy.destroy()
        proxies.clear()

    async def finish() -> None:
        for handle in watchdog:
            handle.cancel()
        for task in pending:
            if not task.done():
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
        closer = getattr(chunks, "aclose", None)
        if closer is not None:
            await closer()
        release()

    def start_finish() -> asyncio.Task[None]:
        # Both cancel and the watchdog end the stream; whichever comes second joins the first.
        if not closing:
            closing.append(asyncio.ensure_future(finish()))
        return closing[0]

    def arm(controller: Any, delay: float) -> None:
        watchdog[:] = [asyncio.get_running_loop().call_later(delay, check, controller)]

    def check(controller: Any) -> None:
        watchdog.clear()
        if closing or not in_flight or stall_s is None:
            return  # taken in time: the next hand-over arms the watchdog again
        waited = asyncio.get_running_loop().time() - in_flight[0]
        if waited < stall_s:
            arm(controller, stall_s - waited)
            return
        _log.warning("a streamed response took no chunk for %.0f s: closing it", stall_s)
        with suppress(Exception):
            controller.error(js.Error.new("stream stalled: the client stopped reading"))
        start_finish()

    async def fill(controller: Any) -> None:
        try:
            chunk = await anext(chunks)
        except StopAsyncIteration:
            controller.close()
            release()
            return
        except Exception as error:
            _log.exception("a streamed response failed")
            controller.error(js.Error.new(f"stream failed: {type(error).__name__}"))
            release()
            return
        controller.enqueue(to_js(chunk))
        # The next pull comes once the platform has sent this chunk.
        in_flight[:] = [asyncio.get_running_loop().time()]
        if stall_s is not None and not watchdog and not closing:
            arm(controller, stall_s)

    def pull(controller: Any) -> Any:
        in_flight.clear()
        task = asyncio.ensure_future(fill(controller))
        pending[:] = [task]
        return task

    async def cancel(reason: Any = None) -> None:
        await start_finish()

    proxies.extend([create_proxy(pull), create_proxy(cancel)])
    return js.ReadableStream.new(_js_object({"pull": proxies[0], "cancel": proxies[1]}))


def _to_platform(response: PlainResponse, stall_s: float | None = None) -> Response:
    if response.stream is not None:
        return Response(
            _readable(response.stream, stall_s), status=response.status,
            headers=response.headers,
        )
    return Response(response.body, status=response.status, headers=response.headers)


def _headers(js_request: Any) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in js_request.headers.items()}


async def _read_capped(request: Any, cap: int) -> bytes | None:
    """The request body, or None once it grows past ``cap`` (the stream is then cancelled)."""
    stream = request.body
    if stream is None or not hasattr(stream, "getReader"):
        return b""
    reader = stream.getReader()

    async def next_chunk() -> bytes | None:
        chunk = await reader.read()
        return None if chunk.done else bytes(chunk.value.to_bytes())

    body = await edge.read_capped(next_chunk, cap)
    if body is None:
        await reader.cancel()
    return body


async def _read_prefix(js_response: Any, limit: int) -> bytes:
    """Up to ``limit`` bytes of a response body; the rest is cancelled, never read."""
    stream = js_response.body
    if stream is None or is_js_null(stream):
        return b""
    reader = stream.getReader()
    kept = bytearray()
    while len(kept) < limit:
        chunk = await reader.read()
        if chunk.done:
            return bytes(kept)
        kept += bytes(chunk.value.to_bytes())
    with suppress(Exception):
        await reader.cancel()
    return bytes(kept[:limit])


class WorkersFetch:
    """The outbound :class:`~threadline.delivery.outbound.HttpPort` in workerd: ``fetch``.

    The ``workers`` SDK's fetch is used because cancelling its wait aborts the request itself
    (a raw ``js.fetch`` under a timeout would leave it running); the one allowance bounds the
    request and the read of the answer. Redirects are not followed (``redirect: "manual"``).
    """

    async def post(
        self, url: str, *, headers: Mapping[str, str], body: bytes, timeout_ms: int
    ) -> OutboundResponse:
        """POST ``body`` to ``url``; :class:`OutboundTimeout` once ``timeout_ms`` has passed."""
        try:
            async with asyncio.timeout(max(timeout_ms, 1) / 1000):
                response = await fetch(
                    url, method=HTTPMethod.POST, headers=dict(headers), body=to_js(body),
                    redirect="manual",
                )
                js_response = response.js_object
                kept = await _read_prefix(js_response, RESPONSE_BODY_LIMIT)
        except TimeoutError as error:
            raise OutboundTimeout(
                f"no answer from {origin(url)} within {timeout_ms} ms") from error
        return OutboundResponse(
            status=int(js_response.status), headers=_headers(response), body=kept)

    async def open(self, request: FetchRequest) -> FetchAnswer:
        """Send ``request`` (an agent's ``turn.http`` call); return once the answer's headers
        are in. Its body is read as it arrives; the caller's timeout cancels this wait, which
        aborts the request."""
        options: dict[str, Any] = {"method": HTTPMethod(request.method),
                                   "headers": dict(request.headers), "redirect": "manual"}
        if request.body is not None:
            options["body"] = to_js(request.body)
        return _StreamedAnswer(await fetch(request.url, **options))


class _StreamedAnswer:
    """A ``fetch`` answer whose body is read from its stream a chunk at a time."""

    def __init__(self, response: Any) -> None:
        self._js = response.js_object
        self.status = int(self._js.status)
        self.headers = _headers(response)
        self._reader: Any = None

    async def chunks(self) -> AsyncIterator[bytes]:
        stream = self._js.body
        if stream is None or is_js_null(stream):
            return
        self._reader = stream.getReader()
        while True:
            chunk = await self._reader.read()
            if chunk.done:
                return
            data = bytes(chunk.value.to_bytes())
            if data:
                yield data

    async def aclose(self) -> None:
        # What is left unread is cancelled, so the platform stops receiving it.
        with suppress(Exception):
            if self._reader is not None:
                await self._reader.cancel()
            elif self._js.body is not None and not is_js_null(self._js.body):
                await self._js.body.cancel()


class _Queue:
    """A Queue producer binding as a :class:`~threadline.delivery.outbound.QueueProducer`."""

    def __init__(self, binding: Any) -> None:
        self._binding = binding

    async def send_batch(self, bodies: Sequence[JsonValue]) -> None:
        messages = [{"body": body, "contentType": "json"} for body in bodies]
        # Through JSON rather than to_js: a None must arrive as null, not undefined (which
        # the Queue's JSON encoding would drop from the message).
        await self._binding.sendBatch(js.JSON.parse(json.dumps(messages)))


class DeliveryEnv:
    """The Worker's environment as subscriber delivery sees it.

    Attributes read through to the environment (secrets, bindings); in addition
    :meth:`queue_producer` adapts a Queue binding, so the JavaScript call stays in this module
    (see :func:`threadline.delivery.outbound.queue_producer`).
    """

    def __init__(self, env: Any) -> None:
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def queue_producer(self, binding: str) -> QueueProducer | None:
        """The Queue bound as ``binding``, or None when the environment has no such binding."""
        value = getattr(self._env, binding, None)
        if value is None or is_js_null(value):
            return None
        # The SDK wraps bindings to convert arguments; the JS binding is called directly here.
        raw = getattr(value, "_binding", value)
        if isinstance(raw, str) or not hasattr(raw, "sendBatch"):
            return None
        return _Queue(raw)


class WorkerBase(WorkerEntrypoint):
    """The Worker: checks the token, ids and body size, then forwards to the space's object."""

    app: ClassVar[Application]
    binding: ClassVar[str] = "THREADS"

    def _edge(self) -> edge.Edge:
        # Built once per Worker instance: the secrets do not change while it lives.
        found = getattr(self, "_checks", None)
        if found is None:
            config = edge.EdgeConfig.from_env(
                self.env, authorize=self.app.authorizer,
                max_body_bytes=self.app.config.max_body_bytes)
            found = self._checks = edge.Edge(config, SystemClock())
        return found

    async def fetch(self, request: Any) -> Response:
        """Check one request at the edge and forward it to the object named by its space."""
        headers = _headers(request)
        method = str(request.method).upper()
        checks = self._edge()
        outcome = await checks.admit(method, str(request.url), headers)
        if isinstance(outcome, PlainResponse):
            return _to_platform(outcome)
        body = b""
        if method not in ("GET", "HEAD"):
            cap = self.app.config.max_body_bytes
            read = await _read_capped(request, cap)
            if read is None:
                refused = edge.body_too_large(cap)
                refused.headers.update(outcome.response_headers)
                return _to_platform(refused)
            body = read
        if outcome.object_name is None:
            return _to_platform(checks.answer(outcome, body))
        stub = getattr(self.env, self.binding).getByName(outcome.object_name)
        forwarded = await stub.fetch(
            outcome.url, method=method, headers=outcome.headers, body=body if body else None)
        # Status and headers (Location, Allow, WWW-Authenticate...) pass through unchanged, and
        # the body as the object's stream: an event stream is relayed chunk by chunk, never
        # buffered here.
        answer = {k: v for k, v in _headers(forwarded).items() if k not in edge.HOP_HEADERS}
        answer.update(outcome.response_headers)
        return Response(forwarded.body, status=forwarded.status, headers=answer)


class BindingRouter:
    """Delivers messages into other spaces through the Worker's Durable Object binding.

    Calls :meth:`ThreadObjectBase.admit_message` on the target space's object
    (``env.THREADS.getByName(space)``, the object the Worker forwards that space's requests
    to). A call that raises (the object unreachable, reset, overloaded) or answers something
    unreadable is transient: the messages lane retries it.
    """

    def __init__(self, env: Any, binding: str) -> None:
        self._env = env
        self._binding = binding

    async def deliver(self, envelope: MessageEnvelope) -> Verdict:
        """Ask the target space's object to admit the message; its verdict."""
        stub = getattr(self._env, self._binding).getByName(envelope.to_space)
        answer = await stub.admit_message(
            envelope.message_id, envelope.to_thread, envelope.agent, envelope.input_json,
            envelope.from_space, envelope.from_thread, envelope.hops,
        )
        return verdict_from_json(answer)


def _object_name(ctx: Any) -> str | None:
    """The name the object was addressed by (``getByName(space)``), when the platform says:
    the space's id. None when it does not: an object its alarm starts (after an eviction or
    a restart) is not given its name, and :class:`~threadline.space.Space` then uses the one
    it stored when it first learned it."""
    try:
        name = ctx.id.name
    except Exception:  # an id made from a random or hex id has no name
        return None
    return name if isinstance(name, str) and name else None


async def yield_to_events() -> None:
    """The deployed :class:`~threadline.pause.Pause`: a JavaScript ``setTimeout(0)``.

    A timer is a macrotask: workerd delivers the requests waiting for the object before it
    fires. ``asyncio.sleep`` (even of a millisecond) and a resolved promise stay inside the
    running event and deliver nothing (measured: ``tests/workerd/test_workerd_yield.py``).
    """
    await js.Promise.new(create_once_callable(
        lambda resolve, _reject: js.setTimeout(resolve, 0)))


class WorkersClock(SystemClock):
    """The deployed clock: the system clock, with timers that leave the platform when cancelled.

    Each Attempt races its agent against a timer (:func:`threadline.clock.timer`). On the event
    loop a cancelled ``call_later`` handle is only skipped when it falls due: the JavaScript
    timeout under it stays active, and workerd allows an event 10,000 active timeouts, so a
    pass that ran 10,000 Attempts in one alarm failed every later one with
    ``QuotaExceededError`` (measured: ``tests/workerd/test_workerd_timers.py``). Here the
    timeout is cleared as soon as the future is done, fired or cancelled.
    """

    def timer(self, epoch_ms: int) -> asyncio.Future[None]:
        """A future resolved once the wall clock reaches ``epoch_ms``; its JavaScript timeout
        is cleared when the future is done, so a cancelled timer holds nothing."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def fire(*_: Any) -> None:
            if not done.done():
                done.set_result(None)

        callback = create_proxy(fire)
        handle = js.setTimeout(callback, max(0, epoch_ms - self.now_ms()))

        def clear(_: asyncio.Future[None]) -> None:
            js.clearTimeout(handle)
            callback.destroy()

        done.add_done_callback(clear)
        return done


class ThreadObjectBase(DurableObject):
    """The Durable Object hosting one space: migrates on start, serves routes, runs the alarm.

    ``binding`` names the Durable Object binding of this class in ``wrangler.toml``: messages
    into other spaces go through it.
    """

    app: ClassVar[Application]
    binding: ClassVar[str] = "THREADS"

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.storage = CloudflareStorage(ctx.storage)
        # Subscribers reach out through the Worker's fetch; Queue bindings are adapted here,
        # where JavaScript calls belong.
        self.space = Space(self.app, self.storage, name=_object_name(ctx),
                           router=BindingRouter(env, self.binding),
                           env=DeliveryEnv(env), http=WorkersFetch(),
                           pause=yield_to_events, clock=WorkersClock())
        ctx.blockConcurrencyWhile(self.space.start)

    async def fetch(self, request: Any) -> Response:
        """Answer a request the Worker forwarded (it already checked token, ids and size)."""
        method = str(request.method).upper()
        body = await request.bytes() if method not in ("GET", "HEAD") else b""
        plain = Request.from_url(method, str(request.url), _headers(request), body)
        stall_s = STALL_HEARTBEATS * self.app.config.sse_heartbeat_ms / 1000
        return _to_platform(await self.space.handle(plain), stall_s)

    async def wake_lane(
        self, lane_id: str, at_ms: float | None = None, cursor: int | None = None
    ) -> None:
        """RPC for the Worker: make the host lane ``lane_id`` due at ``at_ms`` (epoch ms; now
        when null), with the cursor semantics of :meth:`Space.wake_lane`::

            await env.THREADS.getByName(space).wake_lane("billing-sync", null, seq)

        Arguments are checked by :func:`~threadline.maintenance.host_lanes.wake_arguments`:
        a NaN or infinite time, or a cursor that is not an integer from 0 to ``2**53 - 1``,
        is refused with a :class:`~threadline.SchedulingError`.
        """
        # JavaScript's undefined arrives as None, its null as pyodide's jsnull: both mean "not
        # given". Anything else is checked, never taken for "not given".
        checked_id, at, given = wake_arguments(
            lane_id, None if is_js_null(at_ms) else at_ms,
            None if is_js_null(cursor) else cursor)
        self.space.wake_lane(checked_id, at, cursor=given)

    async def admit_message(
        self,
        message_id: Any,
        to_thread: Any,
        agent: Any = None,
        input_json: Any = None,
        from_space: Any = None,
        from_thread: Any = None,
        hops: Any = None,
    ) -> str:
        """RPC for another space's object: admit a message sent with ``turn.send`` as a
        submission of ``to_thread`` (see :meth:`Space.admit_message`), idempotently by
        ``message_id``; returns the verdict as JSON text (``{"accepted": true,
        "submission_id": ...}`` or ``{"accepted": false, "reason": ...}``). ``hops`` is the
        message's hop count (none: a sender that does not send one, counted as 1);
        ``from_space`` and ``from_thread`` where the sender says it sent it from (kept with
        the submission, and checked against ``message_senders``). The platform lets only
        this account's Workers hold the namespace binding; the object takes their word for
        the sender. Raises for a storage failure: the sender retries."""
        if hops is None or is_js_null(hops):
            hops = 1
        elif isinstance(hops, float) and hops.is_integer():
            hops = int(hops)  # a JavaScript number; anything else is refused as it is
        verdict = self.space.admit_message(
            message_id, to_thread, None if is_js_null(agent) else agent, input_json, hops=hops,
            from_space=None if is_js_null(from_space) else from_space,
            from_thread=None if is_js_null(from_thread) else from_thread)
        return verdict_to_json(verdict)

    async def alarm(self, alarm_info: Any = None) -> None:
        """Run one maintenance pass; failures are handled inside with a durable backoff."""
        retry_count = int(getattr(alarm_info, "retryCount", 0) or 0) if alarm_info else 0
        await self.space.alarm(retry_count)


__all__ = [
    "TOKEN_SECRET",
    "BindingRouter",
    "DeliveryEnv",
    "ThreadObjectBase",
    "WorkerBase",
    "WorkersFetch",
]
