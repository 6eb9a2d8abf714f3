"""Subscriber declarations: who consumes a space's Thread logs, and how a batch reaches them.

A subscriber is a durable cursor over the records of a space's Threads. The declaration here is
pure data; the maintenance pass delivers (``threadline.maintenance.publication_lane``). Built-in
destinations (webhook, queue) and ``@app.subscriber`` functions share one shape: a
:data:`Deliver` coroutine given a batch and a :class:`DeliveryContext`. It returns to deliver the
batch, raises :class:`~threadline.DeliveryRefused` to park the subscriber, and raises anything
else to have the batch retried with backoff. An exception with a ``retry_after_ms`` attribute
(an int >= 0, as a webhook's :class:`~threadline.delivery.webhooks.WebhookUnavailable` carries
from a ``Retry-After``) asks for that delay instead of the backoff (:func:`retry_after_of`).

A parking that only the Worker's environment can lift (a webhook's secret not set, a Queue
binding missing) is lifted at the next start where the environment has it: the delivery
function says so with a ``lifts_parking(detail, env)`` method (:func:`parking_lifted`), and
the subscriber resumes from its cursor.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from threadline.delivery.outbound import HttpPort
from threadline.errors import SchedulingError
from threadline.threads.records import Record

#: A subscriber name: a letter, then up to 63 of ``[A-Za-z0-9_.-]``.
NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_.-]{0,63}"
_NAME = re.compile(NAME_PATTERN)
MAX_BATCH = 1_000
MIN_DISPATCH_TIMEOUT = timedelta(milliseconds=1)
MAX_DISPATCH_TIMEOUT = timedelta(seconds=300)
DEFAULT_DISPATCH_TIMEOUT = timedelta(seconds=30)
#: The bound of one batch in bytes: its records as JSON (``Record.to_json``). A batch is
#: held at once as the rows read, the records and the JSON a destination sends, a few times
#: its size, so the default (1 MiB) stays well inside the object's 128 MB and the largest
#: (8 MiB) inside it still. A record larger than the bound goes alone, in a batch of its own.
DEFAULT_BATCH_BYTES = 1_048_576
MIN_BATCH_BYTES = 1_024
MAX_BATCH_BYTES = 8 * 1_048_576

Start = Literal["beginning", "now"]


@dataclass(frozen=True, slots=True)
class DeliveryContext:
    """What a delivery may use besides its batch.

    ``env`` is the Worker's environment (secrets, bindings; None outside workerd), ``http`` the
    outbound HTTP port, ``now_ms`` the injected clock's reading when the wave began.
    """

    space: str
    subscriber: str
    env: Any
    http: HttpPort | None
    now_ms: int


Deliver = Callable[[list[Record], DeliveryContext], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SubscriberSpec:
    """One declared subscriber. Validated when built, so a bad declaration fails at import."""

    name: str
    deliver: Deliver
    kinds: frozenset[str] | None = None
    start: Start = "beginning"
    version: int = 1
    required: bool = False
    batch: int = 100
    dispatch_timeout: timedelta = DEFAULT_DISPATCH_TIMEOUT
    batch_bytes: int = DEFAULT_BATCH_BYTES

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or _NAME.fullmatch(self.name) is None:
            raise SchedulingError(f"subscriber name {self.name!r} must match {NAME_PATTERN}")
        if self.start not in ("beginning", "now"):
            raise SchedulingError(
                f"subscriber {self.name!r}: start must be 'beginning' or 'now', not {self.start!r}"
            )
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise SchedulingError(f"subscriber {self.name!r}: version must be an int >= 1")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or not (
            1 <= self.batch <= MAX_BATCH
        ):
            raise SchedulingError(f"subscriber {self.name!r}: batch must be 1..{MAX_BATCH}")
        if not isinstance(self.dispatch_timeout, timedelta) or not (
            MIN_DISPATCH_TIMEOUT <= self.dispatch_timeout <= MAX_DISPATCH_TIMEOUT
        ):
            raise SchedulingError(
                f"subscriber {self.name!r}: dispatch_timeout must be a timedelta from 1 ms to 300 s"
            )
        if isinstance(self.batch_bytes, bool) or not isinstance(self.batch_bytes, int) or not (
            MIN_BATCH_BYTES <= self.batch_bytes <= MAX_BATCH_BYTES
        ):
            raise SchedulingError(
                f"subscriber {self.name!r}: batch_bytes must be an int from {MIN_BATCH_BYTES}"
                f" to {MAX_BATCH_BYTES}"
            )
        if self.kinds is not None and not self.kinds:
            raise SchedulingError(f"subscriber {self.name!r}: kinds is empty; use None for all")

    @property
    def dispatch_timeout_ms(self) -> int:
        """The allowance of one delivery, in whole milliseconds."""
        return int(self.dispatch_timeout / timedelta(milliseconds=1))

    def wants(self, kind: str) -> bool:
        """Whether a record of ``kind`` goes to this subscriber."""
        return self.kinds is None or kind in self.kinds


def retry_after_of(error: BaseException) -> int | None:
    """The delay (ms) a failed delivery asked for: its ``retry_after_ms`` when that is an int
    >= 0, else None (the subscriber backs off as usual). The lane caps it at the backoff
    ceiling, so a destination cannot ask to be left alone for longer than any backoff."""
    asked = getattr(error, "retry_after_ms", None)
    if isinstance(asked, bool) or not isinstance(asked, int) or asked < 0:
        return None
    return asked


def oversize_rule(spec: SubscriberSpec) -> str:
    """What a record too large for ``spec``'s destination does, as ``/maintenance`` says it:
    the delivery's own ``oversize`` when it has one, else the rule every subscriber shares."""
    rule = getattr(spec.deliver, "oversize", None)
    return rule if isinstance(rule, str) else (
        f"a record over batch_bytes ({spec.batch_bytes}) is delivered alone, in a batch of "
        "its own")


def parking_lifted(spec: SubscriberSpec, detail: str | None, env: Any) -> bool:
    """Whether ``env`` lifts the parking ``spec``'s delivery recorded with ``detail``: its
    ``lifts_parking(detail, env)`` says so (a delivery without one is never unparked this
    way; a destination's own refusal waits for a deploy or an operator)."""
    check = getattr(spec.deliver, "lifts_parking", None)
    return callable(check) and check(detail, env) is True


def kinds_of(kinds: Iterable[str] | None) -> frozenset[str] | None:
    """A subscriber's kinds as declared: None for every kind, else a set of kinds (a lone
    string is refused, as by ``@app.subscriber``: it is not the set of its characters)."""
    if kinds is None:
        return None
    if isinstance(kinds, str):
        raise SchedulingError(f"kinds is a set of kinds, not the string {kinds!r}")
    chosen = frozenset(kinds)
    if not all(isinstance(kind, str) and kind for kind in chosen):
        raise SchedulingError("kinds holds non-empty strings")
    return chosen


class Subscribers:
    """The subscribers an :class:`~threadline.Application` declares, in declaration order."""

    def __init__(self) -> None:
        self._specs: dict[str, SubscriberSpec] = {}

    def add(self, spec: SubscriberSpec) -> SubscriberSpec:
        """Declare ``spec``; a name declared twice is refused."""
        if spec.name in self._specs:
            raise SchedulingError(f"subscriber {spec.name!r} is already declared")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> SubscriberSpec | None:
        """The subscriber called ``name``, if declared."""
        return self._specs.get(name)

    def __iter__(self) -> Iterator[SubscriberSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)


__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_DISPATCH_TIMEOUT",
    "MAX_BATCH_BYTES",
    "MIN_BATCH_BYTES",
    "NAME_PATTERN",
    "Deliver",
    "DeliveryContext",
    "Start",
    "SubscriberSpec",
    "Subscribers",
    "kinds_of",
    "oversize_rule",
    "parking_lifted",
    "retry_after_of",
]
