"""``TurnTransport``: an httpx2 transport whose requests go out through ``turn.http``.

Pydantic AI's model clients (the OpenAI SDK among them) speak HTTP through an ``httpx2``
client. Given ``httpx2.AsyncClient(transport=TurnTransport())``, every request such a client
makes leaves through the active Turn's outbound port instead of a socket of its own: under
workerd the Worker's ``fetch`` (where no socket library runs), under CPython httpx, in tests
:class:`~threadline.testing.FakeFetch`. So a model request is bounded and timed like any
``turn.http`` call (its ``timeout`` measured on the object's clock) and is refused outside a
step, where its answer would not be journaled.

The answer is handed over as it arrives (a provider's server-sent events stream through), its
status unjudged: the model client reads a 429 and its ``Retry-After`` as it always does, and the
operation backend turns the client's error into :class:`~threadline.RetryAfter`. The port
hands over bodies already decoded, so the answer's ``content-encoding`` and ``content-length``
are not passed on, and no ``accept-encoding`` is asked for.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx2

from threadline.errors import HttpTimeout, HttpTransportError, ValidationFailed
from threadline.pydantic_ai.active_run import active_run
from threadline.threads.turn_http import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    MAX_TIMEOUT_S,
    HttpStream,
)

#: Request headers the port sets itself (or that would ask for an encoded body).
DROPPED_REQUEST_HEADERS = frozenset({
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade",
    "accept-encoding", "te", "trailer", "proxy-connection",
})
#: Answer headers that describe the bytes on the wire, not the decoded body handed over.
DROPPED_ANSWER_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class TurnTransport(httpx2.AsyncBaseTransport):
    """Sends an httpx2 client's requests through the active Turn's ``turn.http``.

    ``timeout`` (seconds) bounds the wait for the answer's headers and then each wait for more
    of its body; by default the client's own read timeout is used, at most 600 s (60 s when the
    client sets none). ``max_bytes`` bounds one answer's body (default 8 MiB). A request made
    outside :func:`~threadline.pydantic_ai.run_durably` raises ``ValidationFailed``.
    """

    def __init__(self, *, timeout: float | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if timeout is not None and (isinstance(timeout, bool) or not 0 < timeout <= MAX_TIMEOUT_S):
            raise ValueError(f"timeout must be seconds above 0, at most {MAX_TIMEOUT_S:g}")
        self._timeout = timeout
        self._max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` through ``turn.http``; the answer, its body still arriving."""
        run = active_run()
        if run is None:
            raise ValidationFailed(
                "a model request through TurnTransport is made inside run_durably, in a "
                "threadline agent: its answer is journaled by the request's step",
                field="http")
        headers: dict[str, str] = {}
        for name, value in request.headers.multi_items():
            name = name.lower()
            if name not in DROPPED_REQUEST_HEADERS:
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
        content = await request.aread()
        scope = AsyncExitStack()
        try:
            answer: HttpStream = await scope.enter_async_context(run.turn.http.stream(
                request.method, str(request.url), headers=headers, content=content or None,
                timeout=self._seconds(request), max_bytes=self._max_bytes))
        except HttpTimeout as error:
            raise httpx2.ReadTimeout(error.message, request=request) from error
        except HttpTransportError as error:
            raise httpx2.ConnectError(error.message, request=request) from error
        kept = [(name, value) for name, value in answer.headers.items()
                if name not in DROPPED_ANSWER_HEADERS]
        return httpx2.Response(answer.status, headers=kept, stream=_Body(answer, scope, request),
                               request=request)

    def _seconds(self, request: httpx2.Request) -> float:
        if self._timeout is not None:
            return self._timeout
        asked = (request.extensions.get("timeout") or {}).get("read")
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) \
                and math.isfinite(asked) and asked > 0:
            return min(float(asked), MAX_TIMEOUT_S)
        return DEFAULT_TIMEOUT_S


class _Body(httpx2.AsyncByteStream):
    """An answer's body as it arrives; closing it gives up the rest and ends the exchange.

    Iterated again (as the OpenAI SDK does to drain what follows a stream's last event), it
    goes on from where the last iteration stopped: the body is read once.
    """

    def __init__(self, answer: HttpStream, scope: AsyncExitStack,
                 request: httpx2.Request) -> None:
        self._chunks = answer.aiter_bytes()
        self._scope = scope
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._chunks:
                yield chunk
        except HttpTimeout as error:
            raise httpx2.ReadTimeout(error.message, request=self._request) from error
        except HttpTransportError as error:
            raise httpx2.ReadError(error.message, request=self._request) from error

    async def aclose(self) -> None:
        await self._scope.aclose()


__all__ = ["DROPPED_ANSWER_HEADERS", "DROPPED_REQUEST_HEADERS", "TurnTransport"]
