"""Webhook destinations: a subscriber's batches POSTed as signed JSON, and the receiver's check.

``app.webhook("crm", url=..., secret_env="CRM_WEBHOOK_SECRET")`` declares a subscriber whose
delivery is one POST per batch through the outbound
:class:`~threadline.delivery.outbound.HttpPort`::

    POST <url>
    Content-Type: application/json
    Idempotency-Key: <64 hex digits naming the batch's records>
    Threadline-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">

    {"space": "...", "subscriber": "crm", "records": [<Record.to_json()>, ...]}

The answer decides the batch: a 2xx delivers it; 408, 429, a 5xx, a timeout or a failure to
reach the host raise :class:`WebhookUnavailable` (the batch is retried with backoff; a 429 or
503 with a ``Retry-After``, seconds or an HTTP date, is retried when it asks instead, never
later than the backoff ceiling, and one that means nothing leaves the backoff); any other
status (another 4xx, a 3xx: redirects are not followed, the signature is for the declared URL)
raises :class:`~threadline.DeliveryRefused` and parks the subscriber, keeping the status and
the start of the response body for ``/maintenance``.

The secret is read from the Worker's environment at each delivery, so rotating it needs no
deploy of code; it never appears in an error, a log line or ``/maintenance``. A secret that is
not set parks the subscriber (naming the variable), and the next start whose environment has
it (``wrangler secret put`` deploys, which restarts the object) resumes it from its cursor
(:meth:`Webhook.lifts_parking`). Several secret
names sign with each secret present (one ``v1`` entry each), so a receiver keeps verifying while
the secret is rotated. Receivers check a request with :func:`verify_signature`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from urllib.parse import urlsplit

from threadline.clock import SystemClock
from threadline.delivery.outbound import (
    HttpPort,
    HttpxPort,
    OutboundResponse,
    OutboundTimeout,
    env_value,
    origin,
    retry_after_ms,
)
from threadline.delivery.subscribers import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_DISPATCH_TIMEOUT,
    DeliveryContext,
    Start,
    SubscriberSpec,
    kinds_of,
)
from threadline.errors import DeliveryRefused, SchedulingError, SignatureInvalid
from threadline.threads.records import Record

SIGNATURE_HEADER = "Threadline-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: How far (seconds) a signature's time may be from the receiver's clock, either way.
DEFAULT_TOLERANCE_S = 300
#: How much of a refusing response's body is kept as the parked subscriber's detail.
DETAIL_BODY_BYTES = 512
#: Statuses below 500 that mean "later", not "never".
RETRY_STATUSES = frozenset({408, 429})
#: The start of the detail of a parking for a secret not set (the variable's name follows).
MISSING_SECRET = "missing secret "  # noqa: S105 - the start of a detail, not a secret
#: Hosts a plain-http URL may name: a receiver on the same machine (development, tests).
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})

#: A header longer than this is refused before it is split: threadline writes ``t=`` and a
#: ``v1=`` per secret (75 characters each), so a few secrets being rotated fit many times over.
MAX_HEADER_CHARS = 4_096

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Unix seconds as threadline writes them: no sign, no leading zero, at most 12 digits (the
# year 33658), so int() never meets a number it refuses to read.
_UNIX_SECONDS = re.compile(r"0|[1-9][0-9]{0,11}")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


class WebhookUnavailable(Exception):
    """The receiver answered "later" (408, 429, 5xx), timed out, or could not be reached.

    Deliberately not a :class:`~threadline.DeliveryRefused`: the batch is retried with backoff.
    ``status`` is the response's status, or None when none came back; ``retry_after_ms`` the
    wait a 429 or 503 asked for with ``Retry-After`` (None: none, or one that means nothing).
    """

    def __init__(
        self, message: str, *, status: int | None = None, retry_after_ms: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_ms = retry_after_ms


# -- signatures ------------------------------------------------------------------------------

def _key(secret: str | bytes) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)


def signature(body: bytes, secret: str | bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>.<body>"`` under ``secret`` (a ``v1`` value)."""
    message = str(int(timestamp)).encode("ascii") + b"." + body
    return hmac.new(_key(secret), message, hashlib.sha256).hexdigest()


def signature_header(body: bytes, secrets: Sequence[str | bytes], timestamp: int) -> str:
    """The ``Threadline-Signature`` value: ``t=<timestamp>`` and one ``v1=`` per secret."""
    if not secrets:
        raise ValueError("a signature needs at least one secret")
    entries = [f"t={int(timestamp)}"]
    entries += [f"v1={signature(body, secret, timestamp)}" for secret in secrets]
    return ",".join(entries)


def _parse(header: str | None) -> tuple[int, list[str]]:
    if not isinstance(header, str) or not header.strip():
        raise SignatureInvalid(f"no {SIGNATURE_HEADER} header")
    if len(header) > MAX_HEADER_CHARS:
        raise SignatureInvalid(f"{SIGNATURE_HEADER} is longer than {MAX_HEADER_CHARS} characters")
    times: list[str] = []
    candidates: list[str] = []
    for item in header.split(","):
        scheme, sep, value = item.strip().partition("=")
        if not sep:
            raise SignatureInvalid(f"malformed {SIGNATURE_HEADER} entry {item.strip()[:20]!r}")
        if scheme == "t":
            times.append(value)
        elif scheme == "v1":
            candidates.append(value)
        # Other schemes are ignored: a later version may sign with both.
    if len(times) != 1 or _UNIX_SECONDS.fullmatch(times[0]) is None:
        raise SignatureInvalid(f"{SIGNATURE_HEADER} needs exactly one t=<unix seconds>")
    if not candidates:
        raise SignatureInvalid(f"{SIGNATURE_HEADER} has no v1 signature")
    return int(times[0]), candidates


def verify_signature(
    body: bytes | str,
    header: str | None,
    secret: str | bytes | Sequence[str | bytes],
    tolerance: float = DEFAULT_TOLERANCE_S,
    *,
    now: float | None = None,
) -> int:
    """Check a webhook request from threadline; return its signed time (unix seconds).

    ``body`` is the request body exactly as received (bytes; a str is encoded as UTF-8), before
    any JSON parsing. ``header`` is the ``Threadline-Signature`` value (None when absent).
    ``secret`` is the shared secret, or several while rotating it: the request verifies when a
    ``v1`` entry matches any of them. ``tolerance`` is how many seconds the signed time may be
    from ``now`` (the system clock when None), either way, which bounds replays.

    Raises :class:`~threadline.SignatureInvalid` (never returns False, never raises anything
    else over what the request carried) when the header is missing, not a string, longer than
    :data:`MAX_HEADER_CHARS`, or malformed, no ``v1`` entry matches, or the time is outside
    the tolerance: forgetting to look at a result cannot accept a forged request, and a
    hostile header is a 4xx of the receiver's, not a 500. Digests are compared in constant
    time (:func:`hmac.compare_digest`).

    Raises :class:`ValueError` at the call, before the request is looked at, for what is the
    receiver's own mistake: an empty secret, a ``tolerance`` that is not a finite number
    >= 0 (a bool, a string, NaN, an infinity: NaN would accept every time), or a ``now`` that
    is not a finite number.
    """
    if not _finite(tolerance) or tolerance < 0:
        raise ValueError("tolerance is a finite number of seconds >= 0")
    if now is not None and not _finite(now):
        raise ValueError("now is a finite number of unix seconds (or None: the system clock)")
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    secrets = [secret] if isinstance(secret, str | bytes | bytearray) else list(secret)
    if not secrets or any(not s for s in secrets):
        raise ValueError("verify_signature needs a non-empty secret")
    timestamp, candidates = _parse(header)
    matched = False
    # A candidate that is not 64 lower-case hex digits can match nothing; it is compared as
    # that many zero bytes, so the time taken stays the same and no text is ever encoded.
    shaped = [candidate.encode("ascii") if _HEX_DIGEST.fullmatch(candidate) else b"\0" * 64
              for candidate in candidates]
    for key in secrets:
        expected = signature(raw, key, timestamp).encode("ascii")
        for candidate_bytes in shaped:
            # Every pair is compared, so the time taken says nothing about which one matched.
            matched |= hmac.compare_digest(expected, candidate_bytes)
    if not matched:
        raise SignatureInvalid("no v1 signature matches the body under the given secret")
    current = SystemClock().now_ms() / 1000 if now is None else now
    if abs(current - timestamp) > tolerance:
        raise SignatureInvalid(
            f"the signature's time {timestamp} is more than {tolerance} s from now"
        )
    return timestamp


def _finite(value: object) -> bool:
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and math.isfinite(value))


# -- the destination ---------------------------------------------------------------------------

def batch_body(space: str, subscriber: str, batch: Sequence[Record]) -> bytes:
    """The JSON a webhook POSTs for ``batch`` (compact, UTF-8)."""
    document = {
        "space": space,
        "subscriber": subscriber,
        "records": [record.to_json() for record in batch],
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def idempotency_key(subscriber: str, version: int, batch: Sequence[Record]) -> str:
    """A name for the batch's records, the same whenever the same records are delivered again.

    A digest of the subscriber, its version and every record id, in order: a retry of the same
    batch carries the same key, a redelivery after a ``version`` bump (a backfill asked for on
    purpose) a new one. Record ids are unique across spaces (they carry a random submission
    id), so the space is left out and nothing but the records can change the key. A retry that
    gathers more records is another batch with another key, so receivers deduplicate each
    record by its ``record_id`` as well.
    """
    digest = hashlib.sha256()
    for part in ("threadline-webhook", subscriber, str(version)):
        digest.update(part.encode("utf-8") + b"\x00")
    for record in batch:
        digest.update(record.record_id.encode("utf-8") + b"\n")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Webhook:
    """The delivery function of a webhook subscriber (see the module docstring)."""

    name: str
    url: str
    secret_env: tuple[str, ...]
    version: int
    timeout_ms: int

    async def __call__(self, batch: list[Record], ctx: DeliveryContext) -> None:
        """POST ``batch``; return once a 2xx came back (see the module docstring)."""
        secrets = self._secrets(ctx)
        body = batch_body(ctx.space, ctx.subscriber, batch)
        headers = {
            "content-type": "application/json",
            "user-agent": "threadline-webhook",
            IDEMPOTENCY_HEADER.lower(): idempotency_key(ctx.subscriber, self.version, batch),
            SIGNATURE_HEADER.lower(): signature_header(body, secrets, ctx.now_ms // 1000),
        }
        http: HttpPort = ctx.http if ctx.http is not None else HttpxPort()
        where = origin(self.url)
        try:
            response = await http.post(
                self.url, headers=headers, body=body, timeout_ms=self.timeout_ms)
        except OutboundTimeout as error:
            raise WebhookUnavailable(
                f"webhook {self.name!r}: {where} did not answer within {self.timeout_ms} ms"
            ) from error
        except Exception as error:
            raise WebhookUnavailable(
                f"webhook {self.name!r}: {where} could not be reached ({type(error).__name__})"
            ) from error
        self._judge(response, where, ctx.now_ms)

    def _secrets(self, ctx: DeliveryContext) -> list[str]:
        first, *others = self.secret_env
        secret = env_value(ctx.env, first)
        if not isinstance(secret, str) or not secret:
            # Parks rather than retries: nothing changes until the secret is set (a deploy
            # or `wrangler secret put`, which restarts the object and unparks it).
            raise DeliveryRefused(
                f"webhook {self.name!r}: the secret {first} is not set in the Worker's "
                "environment (once it is, the next start resumes the subscriber)",
                detail=MISSING_SECRET + first,
            )
        extra = [env_value(ctx.env, name) for name in others]
        return [secret] + [value for value in extra if isinstance(value, str) and value]

    @property
    def oversize(self) -> str:
        """What a record too large for the receiver does (shown in ``/maintenance``)."""
        return ("a record over batch_bytes is POSTed alone; a receiver refusing a body that "
                "large (413, or another 4xx but 408 and 429) parks the subscriber with its "
                "answer")

    def lifts_parking(self, detail: str | None, env: object) -> bool:
        """Whether ``env`` lifts a parking with ``detail``: one for a missing secret (whichever
        variable it named: a deploy may have renamed it), once the first secret is set."""
        if detail is None or not detail.startswith(MISSING_SECRET):
            return False
        secret = env_value(env, self.secret_env[0])
        return isinstance(secret, str) and bool(secret)

    def _judge(self, response: OutboundResponse, where: str, now_ms: int) -> None:
        status = response.status
        if 200 <= status < 300:
            return
        excerpt = response.body[:DETAIL_BODY_BYTES].decode("utf-8", "replace")
        detail = f"HTTP {status}" + (f": {excerpt}" if excerpt else "")
        if status in RETRY_STATUSES or 500 <= status < 600:
            # RFC 9110 gives Retry-After its meaning on 429 and 503 (and 3xx, never followed).
            asked = (retry_after_ms(response.headers.get("retry-after"), now_ms)
                     if status in (429, 503) else None)
            raise WebhookUnavailable(
                f"webhook {self.name!r}: {where} answered {detail}", status=status,
                retry_after_ms=asked)
        raise DeliveryRefused(
            f"webhook {self.name!r}: {where} refused the batch with HTTP {status}", detail=detail
        )


def check_url(name: str, url: object) -> str:
    """``url`` if a webhook may POST to it: https, or http to this machine only."""
    if not isinstance(url, str) or not url:
        raise SchedulingError(f"webhook {name!r}: url must be a non-empty string")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here, at declaration
    except ValueError as error:
        raise SchedulingError(f"webhook {name!r}: url is malformed ({error})") from None
    if not parts.hostname:
        raise SchedulingError(f"webhook {name!r}: url names no host")
    if parts.username is not None or parts.password is not None:
        raise SchedulingError(f"webhook {name!r}: url must not carry credentials")
    if parts.scheme == "https":
        return url
    if parts.scheme == "http" and parts.hostname in LOCAL_HOSTS:
        return url
    raise SchedulingError(
        f"webhook {name!r}: url must be https (plain http only to localhost or 127.0.0.1)"
    )


def check_secret_env(name: str, secret_env: object) -> tuple[str, ...]:
    """The secret's environment names: one, or several (the first required) while rotating."""
    names = (secret_env,) if isinstance(secret_env, str) else secret_env
    if not isinstance(names, Iterable):
        raise SchedulingError(f"webhook {name!r}: secret_env must name an environment variable")
    checked = tuple(names)
    if not checked or any(
        not isinstance(n, str) or _ENV_NAME.fullmatch(n) is None for n in checked
    ):
        raise SchedulingError(
            f"webhook {name!r}: secret_env must name environment variables "
            "(letters, digits and _)"
        )
    return checked


def webhook_spec(
    name: str,
    *,
    url: str,
    secret_env: str | Sequence[str],
    kinds: Iterable[str] | None = None,
    start: Start = "beginning",
    version: int = 1,
    required: bool = False,
    batch: int = 100,
    dispatch_timeout: timedelta = DEFAULT_DISPATCH_TIMEOUT,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> SubscriberSpec:
    """The :class:`~threadline.delivery.subscribers.SubscriberSpec` of ``app.webhook(...)``."""
    checked_url = check_url(name, url)
    names = check_secret_env(name, secret_env)

    deliver = Webhook(name, checked_url, names, version, timeout_ms=1)
    spec = SubscriberSpec(
        name=name, deliver=deliver, kinds=kinds_of(kinds), start=start, version=version,
        required=required, batch=batch, dispatch_timeout=dispatch_timeout,
        batch_bytes=batch_bytes,
    )
    # The HTTP allowance is taken once the spec has checked its own, a little short of it, so
    # a slow receiver ends as a timeout with its own message rather than as a cancellation.
    allowance = spec.dispatch_timeout_ms
    timeout_ms = max(1, allowance - min(1_000, allowance // 10))
    return replace(spec, deliver=replace(deliver, timeout_ms=timeout_ms))


__all__ = [
    "DEFAULT_TOLERANCE_S",
    "IDEMPOTENCY_HEADER",
    "MAX_HEADER_CHARS",
    "SIGNATURE_HEADER",
    "Webhook",
    "WebhookUnavailable",
    "batch_body",
    "idempotency_key",
    "signature",
    "signature_header",
    "verify_signature",
    "webhook_spec",
]
