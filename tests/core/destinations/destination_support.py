"""Fakes for the destination tests: an HttpPort that records requests, a Queue producer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from threadline.delivery.outbound import OutboundResponse
from threadline.delivery.subscribers import DeliveryContext
from threadline.threads.records import Record

NOW_MS = 1_700_000_000_123


@dataclass
class Sent:
    url: str
    headers: dict[str, str]
    body: bytes
    timeout_ms: int


@dataclass
class FakeHttp:
    """Answers each POST with ``answer`` (a response, or an exception to raise)."""

    answer: OutboundResponse | BaseException | Callable[[Sent], OutboundResponse] = field(
        default_factory=lambda: OutboundResponse(200))
    sent: list[Sent] = field(default_factory=list)

    async def post(
        self, url: str, *, headers: Mapping[str, str], body: bytes, timeout_ms: int
    ) -> OutboundResponse:
        request = Sent(url, dict(headers), body, timeout_ms)
        self.sent.append(request)
        if isinstance(self.answer, BaseException):
            raise self.answer
        if callable(self.answer):
            return self.answer(request)
        return self.answer


@dataclass
class FakeQueue:
    """A Queue producer binding: keeps every call's bodies; raises ``fail`` when set."""

    calls: list[list[Any]] = field(default_factory=list)
    fail: BaseException | None = None

    async def send_batch(self, bodies: Sequence[Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append(list(bodies))


def records(n: int, *, thread: str = "t1", start: int = 1, body: Any = None) -> list[Record]:
    return [
        Record(thread_id=thread, seq=seq, record_id=f"r-{thread}-{seq}",
               submission_id=f"s{seq}" if seq % 2 else None, kind="submission.settled",
               body=body if body is not None else {"outcome": "completed", "n": seq},
               created_at=NOW_MS - 1_000 + seq)
        for seq in range(start, start + n)
    ]


def context(env: Any, http: Any = None, *, subscriber: str = "crm",
            now_ms: int = NOW_MS, space: str = "acme") -> DeliveryContext:
    return DeliveryContext(space=space, subscriber=subscriber, env=env, http=http,
                           now_ms=now_ms)
