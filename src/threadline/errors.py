"""The one error tree of threadline.

Every error the library raises on purpose derives from :class:`ThreadlineError` and carries a
stable :class:`ErrorCode`. Lower-layer failures (sqlite3, JavaScript exceptions from workerd) are
mapped to the most specific class here at one boundary, the storage adapter, and chained with
``raise ... from``::

    ThreadlineError
    ├── StorageError                 the storage engine refused or failed a statement
    │   ├── StorageValueTooLarge     it refused a value over its row limit (``SQLITE_TOOBIG``)
    │   └── SchemaError              the database schema is unknown, newer, or a migration failed
    ├── SchedulingError              the alarm substrate was misused (gate inside a transaction)
    │   └── InvalidSchedule          a schedule declaration was refused: id, interval, cron or zone
    ├── ApiError                     a request the HTTP surface rejects; has an HTTP status
    │   ├── ValidationFailed         400/422: malformed JSON, bad ids, schema violations
    │   │   └── ValueTooLarge        413: a value over ``max_value_bytes``
    │   ├── Unauthorized             401: missing or wrong bearer token
    │   ├── Forbidden                403: the credentials do not open this route or resource
    │   ├── NotFound                 404: no such route, submission or approval
    │   ├── Conflict                 409: idempotency key reused with other input, bad state
    │   └── PayloadTooLarge          413: body above the configured cap
    ├── BindingUnavailable           a submission names an agent this deployment does not register
    ├── DeliveryRefused              a destination refused a batch for good; its subscriber parks
    ├── SignatureInvalid             a webhook's ``Threadline-Signature`` does not verify
    └── AgentError                   raised by (or on behalf of) an agent's code
        ├── RetryableAgentError      the Attempt fails and is retried with backoff
        │   ├── AttemptTimeout       the Attempt outran ``attempt_timeout_ms`` and was cancelled
        │   ├── HttpTimeout          ``turn.http``: no answer (or no next chunk) in time
        │   ├── HttpTransportError   ``turn.http``: the request failed before an answer
        │   ├── AnswerTooLarge       ``turn.http``: the answer grew past its ``max_bytes``
        │   └── HttpServerError      ``raise_for_status``: a 5xx, 408, 425 or 429 answer
        ├── NonRetryable             the submission settles ``failed`` at once
        │   └── HttpClientError      ``raise_for_status``: any other 4xx answer
        └── RetryAfter               a step asks to be tried again after a delay (a 429 or 503
                                     with ``Retry-After``), without spending ``max_attempts``

    ``HttpError`` is the base of the four ``turn.http`` errors above and ``HttpStatusError``
    of the two ``raise_for_status`` ones, so an agent can catch either family at once.

    BaseException
    └── Evicted                      simulated loss of the object; ``except Exception`` cannot
                                     swallow it, exactly like a real eviction

Configuration errors are pydantic ``ValidationError`` s raised by :class:`threadline.RuntimeConfig`;
they name each offending field.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """Stable, machine-readable identifiers carried by every :class:`ThreadlineError`."""

    STORAGE = "storage"
    SCHEMA = "schema"
    SCHEDULING = "scheduling"
    INVALID_SCHEDULE = "invalid-schedule"
    VALIDATION = "validation"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not-found"
    CONFLICT = "conflict"
    PAYLOAD_TOO_LARGE = "payload-too-large"
    BINDING_UNAVAILABLE = "binding-unavailable"
    DELIVERY_REFUSED = "delivery-refused"
    SIGNATURE_INVALID = "signature-invalid"
    AGENT = "agent"
    AGENT_RETRYABLE = "agent-retryable"
    AGENT_NON_RETRYABLE = "agent-non-retryable"
    HTTP = "http"
    RETRY_AFTER = "retry-after"


class ThreadlineError(Exception):
    """Root of every error threadline raises deliberately."""

    code: ErrorCode = ErrorCode.STORAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StorageError(ThreadlineError):
    """A storage statement, transaction or alarm call failed; the transaction was rolled back."""

    code = ErrorCode.STORAGE


class StorageValueTooLarge(StorageError):
    """The storage engine refused a string, blob or row as too large (``SQLITE_TOOBIG``).

    Unlike most storage failures this one is not transient: the same write fails again.
    """


def is_too_big(message: str) -> bool:
    """Whether a storage engine's error message reports ``SQLITE_TOOBIG``."""
    lowered = message.lower()
    return "sqlite_toobig" in lowered or "string or blob too big" in lowered


class SchemaError(StorageError):
    """The stored schema cannot be used by this code (newer version, or a failed migration)."""

    code = ErrorCode.SCHEMA


class SchedulingError(ThreadlineError):
    """The scheduling substrate was used against its contract."""

    code = ErrorCode.SCHEDULING


class InvalidSchedule(SchedulingError):
    """A schedule declaration was refused when it was made, never later when it would fire.

    The message names the schedule and what is wrong: its id, its interval, its cron expression
    or its time zone (unknown, or no time zone data in this runtime).
    """

    code = ErrorCode.INVALID_SCHEDULE


class ApiError(ThreadlineError):
    """A request the HTTP surface rejects. ``status`` is the HTTP status to answer with."""

    code = ErrorCode.VALIDATION
    status: int = 400
    title: str = "Bad request"

    def __init__(self, message: str, *, field: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.field = field
        self.extra = extra


class ValidationFailed(ApiError):
    """Malformed input: bad JSON (400) or a value that violates the schema (422)."""

    code = ErrorCode.VALIDATION
    status = 422
    title = "Invalid request"

    def __init__(
        self, message: str, *, field: str | None = None, status: int = 422, **extra: Any
    ) -> None:
        super().__init__(message, field=field, **extra)
        self.status = status


class ValueTooLarge(ValidationFailed):
    """A value whose JSON is larger than ``RuntimeConfig.max_value_bytes``."""

    title = "Value too large"

    def __init__(self, message: str, *, field: str | None = None, **extra: Any) -> None:
        super().__init__(message, field=field, status=413, **extra)


class Unauthorized(ApiError):
    """The bearer token is missing or wrong. The response never says which."""

    code = ErrorCode.UNAUTHORIZED
    status = 401
    title = "Unauthorized"


class Forbidden(ApiError):
    """The credentials are valid but do not open this route, space or Thread."""

    code = ErrorCode.FORBIDDEN
    status = 403
    title = "Forbidden"


class NotFound(ApiError):
    """No such route, thread or submission."""

    code = ErrorCode.NOT_FOUND
    status = 404
    title = "Not found"


class Conflict(ApiError):
    """The request contradicts stored state, e.g. an idempotency key reused with other input."""

    code = ErrorCode.CONFLICT
    status = 409
    title = "Conflict"


class PayloadTooLarge(ApiError):
    """The request body exceeds ``RuntimeConfig.max_body_bytes``."""

    code = ErrorCode.PAYLOAD_TOO_LARGE
    status = 413
    title = "Payload too large"


class BindingUnavailable(ThreadlineError):
    """A submission names an agent (or version) that this deployment does not register."""

    code = ErrorCode.BINDING_UNAVAILABLE

    def __init__(self, agent: str) -> None:
        super().__init__(f"no agent named {agent!r} is registered in this deployment")
        self.agent = agent


class DeliveryRefused(ThreadlineError):
    """A subscriber's destination refused a batch for good (a webhook's 4xx other than 408/429).

    Raised by a subscriber's delivery function to park the subscriber instead of retrying:
    redelivering the same batch would be refused again. ``detail`` (the response's status and
    the start of its body, say) is kept and shown in ``/maintenance`` until a deploy or an
    operator unparks it. Any other exception a subscriber raises is retried with backoff.

    ``record_id`` names the one record refused, when the destination can tell (a Queue message
    over its size limit) and delivered nothing of the batch: the records before it are then
    delivered alone first, so the subscriber parks with that record at its cursor, for an
    operator to skip exactly it.
    """

    code = ErrorCode.DELIVERY_REFUSED

    def __init__(
        self, message: str, *, detail: str | None = None, record_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.detail = detail
        self.record_id = record_id


class SignatureInvalid(ThreadlineError):
    """Raised by :func:`threadline.verify_signature` on a receiver: the request's
    ``Threadline-Signature`` is missing, malformed, outside the tolerance, or made with another
    secret or over another body. Answer it with a 4xx and do not process the request."""

    code = ErrorCode.SIGNATURE_INVALID


class AgentError(ThreadlineError):
    """Base for errors raised by or for agent code."""

    code = ErrorCode.AGENT


class RetryableAgentError(AgentError):
    """The Attempt failed; it is retried with backoff until ``max_attempts``."""

    code = ErrorCode.AGENT_RETRYABLE


class AttemptTimeout(RetryableAgentError):
    """The Attempt ran longer than ``RuntimeConfig.attempt_timeout_ms``; its agent was cancelled.

    It fails the Attempt like any retryable error, spending ``max_attempts`` (unlike an
    Attempt lost to a reset of the object), unless an uncertain step was in flight, which makes
    the submission an Unknown Outcome.
    """


class NonRetryable(AgentError):
    """Raise from an agent to settle the submission ``failed`` without further attempts."""

    code = ErrorCode.AGENT_NON_RETRYABLE


class HttpError(AgentError):
    """Base of what ``turn.http`` raises: a timeout, a transport failure, an answer too large,
    or (from ``raise_for_status``) a refusal. Messages name the destination by its origin
    only (``https://api.example.com``): a URL's path or query may carry a credential."""

    code = ErrorCode.HTTP


class HttpTimeout(HttpError, RetryableAgentError):
    """No answer within the call's ``timeout``, or no next chunk of its body within it."""

    code = ErrorCode.HTTP


class HttpTransportError(HttpError, RetryableAgentError):
    """The request failed before an answer came: DNS, a refused or reset connection."""

    code = ErrorCode.HTTP


class AnswerTooLarge(HttpError, RetryableAgentError):
    """The answer's body grew past the call's ``max_bytes``; what was read is dropped."""

    code = ErrorCode.HTTP


class HttpStatusError(HttpError):
    """``raise_for_status`` on an answer of status 400 or above: ``status`` holds it and
    ``body`` up to 4 KiB of the answer (an API's explanation of its refusal)."""

    code = ErrorCode.HTTP

    def __init__(self, message: str, *, status: int, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class HttpServerError(HttpStatusError, RetryableAgentError):
    """A 5xx, 408 (timeout), 425 (too early) or 429 (too many requests) answer without a
    usable ``Retry-After``: worth trying again later, so the Attempt is retried."""

    code = ErrorCode.HTTP


class HttpClientError(HttpStatusError, NonRetryable):
    """Any other 4xx answer (a bad key, a malformed request): the same request would be
    refused again, so the submission fails at once unless the agent catches it."""

    code = ErrorCode.HTTP


class RetryAfter(AgentError):
    """Raise in a step to have it tried again after ``seconds``, as a provider's 429 or 503
    with ``Retry-After`` asks (``raise_for_status`` raises it for you).

    The wait does not spend ``max_attempts`` or a try of the step's ``RetryPolicy``. A wait
    of up to ``INLINE_WAIT_MS`` (5 s) that ends before the Attempt's bound is waited in the
    Attempt; a longer one suspends it on a durable timer (the object's alarm wakes it, no
    handler is held). A step waits at most ``RetryPolicy.max_waits`` times, each at most
    ``RetryPolicy.max_wait_ms``; past either bound the ``RetryAfter`` counts as the step's
    failure, as does one raised outside a step (its Attempt is then retried no earlier than
    it asked). ``seconds`` is a finite number from 0 to 366 days (a ``ValueError`` otherwise).
    """

    code = ErrorCode.RETRY_AFTER

    def __init__(self, seconds: float, reason: str = "") -> None:
        if (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                or not 0 <= seconds <= _MAX_RETRY_AFTER_S):
            raise ValueError("RetryAfter seconds must be a finite number from 0 to 366 days")
        delay_ms = math.ceil(seconds * 1000)
        super().__init__(f"retry after {delay_ms} ms" + (f": {reason}" if reason else ""))
        #: The asked delay in whole milliseconds, rounded up.
        self.delay_ms = delay_ms
        self.reason = reason


_MAX_RETRY_AFTER_S = 366 * 86_400


class Evicted(BaseException):
    """Simulated loss of the object at a failpoint. Never raised in production.

    It derives from ``BaseException`` so agent code and library code that catch ``Exception``
    cannot swallow it, just as they cannot survive a real eviction.
    """

    def __init__(self, location: str = "") -> None:
        super().__init__(location)
        self.location = location


__all__ = [
    "AgentError",
    "AnswerTooLarge",
    "ApiError",
    "AttemptTimeout",
    "BindingUnavailable",
    "Conflict",
    "DeliveryRefused",
    "ErrorCode",
    "Evicted",
    "HttpClientError",
    "HttpError",
    "HttpServerError",
    "HttpStatusError",
    "HttpTimeout",
    "HttpTransportError",
    "InvalidSchedule",
    "NonRetryable",
    "NotFound",
    "PayloadTooLarge",
    "RetryAfter",
    "RetryableAgentError",
    "SchedulingError",
    "SchemaError",
    "SignatureInvalid",
    "StorageError",
    "StorageValueTooLarge",
    "ThreadlineError",
    "Unauthorized",
    "ValidationFailed",
    "ValueTooLarge",
    "is_too_big",
]
