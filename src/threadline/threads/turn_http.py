"""``turn.http``: an agent's HTTP client, through the object's outbound port.

A call is I/O whose answer must be journaled to be replayed, so it is refused outside a step:
the step's value is what a replay gets back, and the request is not made again. Inside one,
:meth:`TurnHttp.request` reads the whole answer (bounded by ``max_bytes``) and
:meth:`TurnHttp.stream` hands the answer over while it arrives, for a provider's server-sent
events. Every failure is an error of threadline's tree (:class:`~threadline.errors.HttpError`),
named by the destination's origin only, never its path, query or headers.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from threadline.clock import Clock
from threadline.clock import timer as clock_timer
from threadline.errors import (
    AnswerTooLarge,
    HttpClientError,
    HttpServerError,
    HttpTimeout,
    HttpTransportError,
    RetryAfter,
    ValidationFailed,
)
from threadline.fetching import (
    FetchAnswer,
    FetchPort,
    FetchRequest,
    OutboundTimeout,
    origin,
    retry_after_ms,
)

#: The default bound of one answer's body, and the largest a call may ask for.
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
MAX_ANSWER_BYTES = 32 * 1024 * 1024
#: The default allowance for the answer's headers and for each next chunk, and its bound.
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0
#: How much of a refused answer's body ``raise_for_status`` keeps on its error.
ERROR_BODY_BYTES = 4_096
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
MAX_URL_CHARS = 8_192
#: Statuses a later try may get past: timeouts, "too early", rate limits and server errors.
_TRANSIENT = frozenset({408, 425, 429})
#: The longest ``Retry-After`` turned into a :class:`~threadline.errors.RetryAfter`.
MAX_RETRY_AFTER_MS = 366 * 86_400_000
_UNSET: Any = object()
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """A whole answer: ``status``, ``headers`` (names lower-cased) and ``content`` bytes."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    content: bytes = b""
    #: The destination's origin, for error messages.
    origin: str = ""
    #: When the answer's headers came (epoch ms, the object's clock): what an HTTP-date
    #: ``Retry-After`` is measured from.
    received_ms: int = 0

    @property
    def ok(self) -> bool:
        """True for a status below 400."""
        return self.status < 400

    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (``ValueError`` when it is not JSON)."""
        return json.loads(self.content)

    def raise_for_status(self) -> HttpAnswer:
        """Return the answer if its status is below 400, else raise (see :func:`refusal`)."""
        if self.status >= 400:
            raise refusal(self.status, self.headers, self.content, self.origin,
                          self.received_ms)
        return self


class HttpStream:
    """An answer whose status and headers are in and whose body is read as it arrives.

    Iterate :meth:`aiter_bytes` or :meth:`aiter_lines` once; the body counts against the call's
    ``max_bytes`` and each wait for a chunk against its ``timeout``.
    """

    def __init__(self, answer: FetchAnswer, *, origin: str, timeout_s: float,
                 max_bytes: int, clock: Clock) -> None:
        self._answer = answer
        self._clock = clock
        #: When the answer's headers came (epoch ms, the object's clock).
        self.received_ms = clock.now_ms()
        self.status: int = int(answer.status)
        self.headers: Mapping[str, str] = {str(k).lower(): str(v)
                                           for k, v in answer.headers.items()}
        self.origin = origin
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._read = 0
        self._started = False

    @property
    def ok(self) -> bool:
        """True for a status below 400."""
        return self.status < 400

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive."""
        if self._started:
            raise RuntimeError("an answer's body can be read once")
        self._started = True
        chunks = self._answer.chunks().__aiter__()
        while True:
            try:
                chunk = await within(self._clock, self._timeout_s, chunks.__anext__())
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise HttpTimeout(f"{self.origin} sent nothing more within "
                                  f"{self._timeout_s:g} s") from None
            except Exception as error:
                raise HttpTransportError(f"reading the answer of {self.origin} failed "
                                         f"({type(error).__name__})") from error
            self._read += len(chunk)
            if self._read > self._max_bytes:
                raise AnswerTooLarge(f"the answer of {self.origin} grew past "
                                     f"{self._max_bytes} bytes")
            yield bytes(chunk)

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body as lines of UTF-8 text, without their line ends (``\\n`` or ``\\r\\n``),
        each as soon as it is complete; a last line without an end comes with the body's end."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        async for chunk in self.aiter_bytes():
            pending += decoder.decode(chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line.removesuffix("\r")
        pending += decoder.decode(b"", final=True)
        if pending:
            yield pending.removesuffix("\r")

    async def read(self) -> HttpAnswer:
        """The rest of the body, whole, as an :class:`HttpAnswer`."""
        body = bytearray()
        async for chunk in self.aiter_bytes():
            body += chunk
        return HttpAnswer(self.status, self.headers, bytes(body), self.origin, self.received_ms)

    async def raise_for_status(self) -> HttpStream:
        """Return the stream if its status is below 400; else read up to 4 KiB of the body
        for the error and raise (see :func:`refusal`)."""
        if self.status < 400:
            return self
        excerpt = bytearray()
        try:
            async for chunk in self.aiter_bytes():
                excerpt += chunk
                if len(excerpt) >= ERROR_BODY_BYTES:
                    break
        except (HttpTimeout, HttpTransportError, AnswerTooLarge):
            pass
        raise refusal(self.status, self.headers, bytes(excerpt), self.origin,
                      self.received_ms)


def refusal(
    status: int, headers: Mapping[str, str], body: bytes, where: str, received_ms: int
) -> Exception:
    """What ``raise_for_status`` raises for a status of 400 or above.

    A 429 or 503 with a ``Retry-After`` it can read (seconds, or an HTTP date taken from
    ``received_ms``, when the answer came) of at most 366 days is a
    :class:`~threadline.errors.RetryAfter` for that long; any other 5xx, 408, 425 or 429 an
    :class:`~threadline.errors.HttpServerError` (the Attempt is retried with backoff); any
    other 4xx an :class:`~threadline.errors.HttpClientError` (the submission fails).
    """
    excerpt = body[:ERROR_BODY_BYTES]
    message = f"{where} answered {status}"
    if status in (429, 503):
        asked = retry_after_ms(headers.get("retry-after"), received_ms)
        if asked is not None and asked <= MAX_RETRY_AFTER_MS:
            return RetryAfter(asked / 1000, reason=message)
    if status >= 500 or status in _TRANSIENT:
        return HttpServerError(message, status=status, body=excerpt)
    return HttpClientError(message, status=status, body=excerpt)


class TurnHttp:
    """``turn.http``: requests made from inside one of the Turn's steps.

    ``inside_step`` says whether the caller runs in a step of this Turn; ``port`` is the
    object's outbound :class:`~threadline.fetching.FetchPort` (None when it has none);
    ``clock`` the object's clock, which every ``timeout`` is measured on.
    """

    def __init__(
        self, port: FetchPort | None, inside_step: Callable[[], bool], clock: Clock
    ) -> None:
        self._port = port
        self._inside_step = inside_step
        self._clock = clock

    async def get(self, url: str, **options: Any) -> HttpAnswer:
        """``request("GET", url, ...)``."""
        return await self.request("GET", url, **options)

    async def post(self, url: str, **options: Any) -> HttpAnswer:
        """``request("POST", url, ...)``."""
        return await self.request("POST", url, **options)

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        json: Any = _UNSET,
        content: bytes | str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> HttpAnswer:
        """Send one request and read its whole answer.

        ``json`` (any JSON value; sets ``content-type: application/json`` unless a header
        does) or ``content`` (bytes, or text sent as UTF-8) is the body, not both. ``timeout``
        (seconds, above 0 and at most 600) bounds the wait for the answer's headers and then
        each wait for more of its body; ``max_bytes`` (1 to 32 MiB) bounds the body. The status
        is not judged: call :meth:`HttpAnswer.raise_for_status`. Refused outside a step.
        """
        async with self.stream(method, url, headers=headers, json=json, content=content,
                               timeout=timeout, max_bytes=max_bytes) as answer:
            return await answer.read()

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        json: Any = _UNSET,
        content: bytes | str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> AsyncIterator[HttpStream]:
        """``async with turn.http.stream(...) as answer:`` the answer as it arrives (see
        :class:`HttpStream`); the arguments are :meth:`request`'s. Leaving the block gives up
        whatever of the body is unread."""
        request, seconds = self._checked(method, url, headers, json, content, timeout,
                                         max_bytes)
        where = origin(request.url)
        try:
            answer = await within(self._clock, seconds, self._open(request))
        except TimeoutError:
            raise HttpTimeout(f"no answer from {where} within {seconds:g} s") from None
        except OutboundTimeout as error:
            raise HttpTimeout(f"no answer from {where} within {seconds:g} s") from error
        except Exception as error:
            raise HttpTransportError(
                f"{request.method} {where} failed before an answer ({type(error).__name__})"
            ) from error
        try:
            yield HttpStream(answer, origin=where, timeout_s=seconds, max_bytes=max_bytes,
                             clock=self._clock)
        finally:
            await answer.aclose()

    async def _open(self, request: FetchRequest) -> FetchAnswer:
        assert self._port is not None
        return await self._port.open(request)

    def _checked(
        self, method: object, url: object, headers: object, body_json: object,
        content: object, timeout: object, max_bytes: object,
    ) -> tuple[FetchRequest, float]:
        if not self._inside_step():
            raise ValidationFailed(
                "turn.http is used inside a step (await turn.step(name, call)): a step "
                "journals the answer, so a replay of the Attempt does not send it again",
                field="http")
        if self._port is None or not isinstance(self._port, FetchPort):
            raise ValidationFailed("this object's outbound port cannot make an agent's "
                                   "requests (it has no open())", field="http")
        if not isinstance(method, str) or method.upper() not in METHODS:
            raise ValidationFailed(f"method must be one of {', '.join(sorted(METHODS))}",
                                   field="method")
        if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
            raise ValidationFailed(f"url must be a string of at most {MAX_URL_CHARS} "
                                   "characters", field="url")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationFailed("url must be an absolute http or https URL", field="url")
        sent = _checked_headers(headers)
        body = _body(body_json, content, sent)
        if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                or not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT_S):
            raise ValidationFailed(f"timeout must be seconds above 0, at most "
                                   f"{MAX_TIMEOUT_S:g}", field="timeout")
        if (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                or not 1 <= max_bytes <= MAX_ANSWER_BYTES):
            raise ValidationFailed(f"max_bytes must be an int from 1 to {MAX_ANSWER_BYTES}",
                                   field="max_bytes")
        seconds = float(timeout)
        return FetchRequest(method.upper(), url, sent, body, math.ceil(seconds * 1000)), seconds


async def within(clock: Clock, seconds: float, work: Awaitable[T]) -> T:
    """``work``'s result, or ``TimeoutError`` (``work`` cancelled) once ``seconds`` have passed
    on ``clock``: the object's clock, so a test's clock decides when a call times out."""
    task = asyncio.ensure_future(work)
    timer = clock_timer(clock, clock.now_ms() + math.ceil(seconds * 1000))
    try:
        await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        timer.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with suppress(BaseException):
        await task
    raise TimeoutError


def _checked_headers(headers: object) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise ValidationFailed("headers must be a mapping of names to values", field="headers")
    sent: dict[str, str] = {}
    for name, value in headers.items():
        if (not isinstance(name, str) or not isinstance(value, str) or not name
                or any(c in name for c in "\r\n:") or "\r" in value or "\n" in value):
            # The value is never echoed: it may be a credential.
            raise ValidationFailed(f"header {name!r} must be a name and a one-line value, "
                                   "both strings", field="headers")
        sent[name.lower()] = value
    return sent


def _body(body_json: object, content: object, headers: dict[str, str]) -> bytes | None:
    if body_json is not _UNSET and content is not None:
        raise ValidationFailed("pass json or content, not both", field="content")
    if body_json is not _UNSET:
        try:
            encoded = json.dumps(body_json, separators=(",", ":"), ensure_ascii=False,
                                 allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValidationFailed(f"json is not a JSON value: {error}", field="json") from None
        headers.setdefault("content-type", "application/json")
        return encoded.encode()
    if content is None:
        return None
    if isinstance(content, str):
        return content.encode()
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    raise ValidationFailed("content must be bytes or str", field="content")


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT_S",
    "MAX_ANSWER_BYTES",
    "MAX_TIMEOUT_S",
    "HttpAnswer",
    "HttpStream",
    "TurnHttp",
    "refusal",
]
