"""Queue destinations: a subscriber's batches sent to a Cloudflare Queue.

``app.queue("audit", binding="EVENTS")`` declares a subscriber whose delivery sends each record
of a batch as one Queue message through the producer binding ``EVENTS`` (``sendBatch``)::

    {"space": "...", "subscriber": "audit", "record": <Record.to_json()>}

The space travels with each record because one Queue usually gathers many spaces' objects.
A consumer deduplicates by ``record.record_id``: delivery is at least once.

The platform bounds a send to 100 messages and 256 KB, and a message to 128 KB: a batch is at
most 100 records (checked at declaration), a batch over 256 KB is sent in several calls (a
failure after the first is retried whole, which the deduplication absorbs), and a record over
128 KB can never be sent: nothing of the batch is sent and the refusal names it, so the
records before it go alone first and the subscriber parks on it, its id in the detail, for an
operator to skip. A missing binding parks it too, until the next start whose environment has
it (adding a binding is a deploy, which restarts the object): the subscriber resumes from its
cursor then. Any error the send raises is retried with backoff (when the error names a
``retry_after_ms``, after that).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from threadline.delivery.outbound import queue_producer
from threadline.delivery.subscribers import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_DISPATCH_TIMEOUT,
    DeliveryContext,
    Start,
    SubscriberSpec,
    kinds_of,
)
from threadline.errors import DeliveryRefused, SchedulingError
from threadline.threads.model import JsonValue
from threadline.threads.records import Record

#: Messages in one ``sendBatch`` call (the platform's bound).
MAX_QUEUE_BATCH = 100
#: Bytes of one message and of one call, kept a little under the platform's 128 KB and 256 KB
#: because the platform counts its own framing as well.
MAX_MESSAGE_BYTES = 127_000
MAX_SEND_BYTES = 250_000
_MESSAGE_OVERHEAD = 100
#: The start of the detail of a parking for a binding not bound (its name follows).
MISSING_BINDING = "missing Queue binding "

_BINDING = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def message_body(space: str, subscriber: str, record: Record) -> dict[str, JsonValue]:
    """The body of the Queue message that carries ``record``."""
    return {"space": space, "subscriber": subscriber, "record": record.to_json()}


def _size(body: JsonValue) -> int:
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


@dataclass(frozen=True, slots=True)
class QueueDestination:
    """The delivery function of a queue subscriber (see the module docstring)."""

    name: str
    binding: str

    @property
    def oversize(self) -> str:
        """What a record too large for a Queue does (shown in ``/maintenance``)."""
        return ("a record over the Queue's 128 KB message limit can never be sent: it parks "
                "the subscriber, naming the record; a batch over 256 KB is sent in several "
                "calls")

    def lifts_parking(self, detail: str | None, env: object) -> bool:
        """Whether ``env`` lifts a parking with ``detail``: one for a missing binding, once a
        producer is bound under this destination's name."""
        return (detail is not None and detail.startswith(MISSING_BINDING)
                and queue_producer(env, self.binding) is not None)

    async def __call__(self, batch: list[Record], ctx: DeliveryContext) -> None:
        """Send ``batch`` to the Queue; return once every call was accepted."""
        producer = queue_producer(ctx.env, self.binding)
        if producer is None:
            raise DeliveryRefused(
                f"queue subscriber {self.name!r}: no Queue producer bound as {self.binding} "
                "in the Worker's environment (once there is, the next start resumes the "
                "subscriber)",
                detail=MISSING_BINDING + self.binding,
            )
        sends: list[list[JsonValue]] = [[]]
        used = 0
        for record in batch:
            body = message_body(ctx.space, ctx.subscriber, record)
            size = _size(body) + _MESSAGE_OVERHEAD
            if size > MAX_MESSAGE_BYTES:
                raise DeliveryRefused(
                    f"queue subscriber {self.name!r}: record {record.record_id} is over the "
                    "Queue's 128 KB message limit",
                    detail=f"record {record.record_id} of Thread {record.thread_id} "
                           f"(seq {record.seq}) is {size} bytes as a message",
                    record_id=record.record_id,
                )
            if sends[-1] and used + size > MAX_SEND_BYTES:
                sends.append([])
                used = 0
            sends[-1].append(body)
            used += size
        for bodies in sends:
            if bodies:
                await producer.send_batch(bodies)


def queue_spec(
    name: str,
    *,
    binding: str = "EVENTS",
    kinds: Iterable[str] | None = None,
    start: Start = "beginning",
    version: int = 1,
    required: bool = False,
    batch: int = MAX_QUEUE_BATCH,
    dispatch_timeout: timedelta = DEFAULT_DISPATCH_TIMEOUT,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> SubscriberSpec:
    """The :class:`~threadline.delivery.subscribers.SubscriberSpec` of ``app.queue(...)``."""
    if not isinstance(binding, str) or _BINDING.fullmatch(binding) is None:
        raise SchedulingError(
            f"queue subscriber {name!r}: binding must name a Worker binding "
            "(letters, digits and _)"
        )
    spec = SubscriberSpec(
        name=name, deliver=QueueDestination(name, binding), kinds=kinds_of(kinds),
        start=start, version=version, required=required, batch=batch,
        dispatch_timeout=dispatch_timeout, batch_bytes=batch_bytes,
    )
    if spec.batch > MAX_QUEUE_BATCH:
        raise SchedulingError(
            f"queue subscriber {name!r}: batch must be at most {MAX_QUEUE_BATCH} "
            "(a Queue takes at most 100 messages a send)"
        )
    return spec


__all__ = ["MAX_QUEUE_BATCH", "QueueDestination", "message_body", "queue_spec"]
