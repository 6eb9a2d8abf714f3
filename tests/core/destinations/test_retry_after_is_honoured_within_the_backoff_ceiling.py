"""A destination that answers 429 or 503 with Retry-After is retried when it asked (seconds
or an HTTP date), never later than the backoff ceiling; a Retry-After that means nothing
leaves the normal backoff. A queue producer that names a retry-after is honoured the same."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from destination_support import FakeHttp, FakeQueue

from threadline.delivery.outbound import OutboundResponse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "maintenance"))
from subscribers_support import CONFIG, clock, emit, log_end, row, writer_app

from threadline.testing import SimulatedObject

URL = "https://crm.example.com/hooks/threadline"
CEILING_MS = CONFIG.alarm_backoff_cap_ms  # 300 s
BASE_MS = CONFIG.alarm_backoff_base_ms    # 1 s: a first failure's backoff is at most this


def _http_date(epoch_ms: int) -> str:
    return format_datetime(datetime.fromtimestamp(epoch_ms / 1000, UTC), usegmt=True)


async def _first_retry_delay(status: int, retry_after: Any) -> tuple[int, list[int]]:
    """The delay the first refusal set, and the ms (from the first POST) of every POST."""
    sent_at: list[int] = []

    def answer(_: Any) -> OutboundResponse:
        sent_at.append(obj.clock.now_ms())
        if len(sent_at) > 1:
            return OutboundResponse(200)
        value = retry_after(obj.clock.now_ms()) if callable(retry_after) else retry_after
        return OutboundResponse(status, headers={"retry-after": value})

    app = writer_app()
    app.webhook("crm", url=URL, secret_env="CRM_SECRET")
    async with SimulatedObject(app, clock=clock(), env={"CRM_SECRET": "s"},
                               http=FakeHttp(answer), check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1))
        while not sent_at:
            await obj.run_alarms(until=obj.clock.now_ms() + 10)
        failed = row(obj, "crm")
        assert failed is not None and failed.retry_at is not None
        assert failed.failed_at is not None
        delay = failed.retry_at - failed.failed_at
        await obj.run_alarms(until=obj.clock.now_ms() + 2 * CEILING_MS)
        delivered = row(obj, "crm")
        assert delivered is not None and delivered.cursor == log_end(obj)
    return delay, [at - sent_at[0] for at in sent_at]


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_in_seconds_sets_the_retry(status: int) -> None:
    delay, posts = asyncio.run(_first_retry_delay(status, "120"))
    assert delay == 120_000
    assert posts == [0, 120_000]


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_as_an_http_date_sets_the_retry(status: int) -> None:
    delay, posts = asyncio.run(_first_retry_delay(status, lambda now: _http_date(now + 90_000)))
    # An HTTP date is whole seconds: the wait is to that second.
    assert 89_000 < delay <= 90_000
    assert posts[1] == delay


@pytest.mark.parametrize("retry_after", ["3600", lambda now: _http_date(now + 86_400_000)])
def test_a_retry_after_above_the_backoff_ceiling_is_capped(retry_after: Any) -> None:
    delay, posts = asyncio.run(_first_retry_delay(429, retry_after))
    assert delay == CEILING_MS
    assert posts == [0, CEILING_MS]


@pytest.mark.parametrize("retry_after", ["soon", "-5", "1.5", ""])
def test_a_garbage_retry_after_falls_back_to_the_normal_backoff(retry_after: str) -> None:
    delay, posts = asyncio.run(_first_retry_delay(503, retry_after))
    assert BASE_MS // 2 <= delay <= BASE_MS
    assert posts == [0, delay]


class _Throttled(Exception):
    """What a Queue producer raises when its platform says when to come back."""

    def __init__(self, retry_after_ms: int) -> None:
        super().__init__("throttled")
        self.retry_after_ms = retry_after_ms


async def _queue_retry_delay() -> int:
    queue = FakeQueue(fail=_Throttled(45_000))
    app = writer_app()
    app.queue("audit", binding="EVENTS")
    async with SimulatedObject(app, clock=clock(), env={"EVENTS": queue}) as obj:
        emit(obj, "t", ("note", 1))
        for _ in range(100):
            failed = row(obj, "audit")
            if failed is not None and failed.failures:
                break
            await obj.run_alarms(until=obj.clock.now_ms() + 10)
        failed = row(obj, "audit")
        assert failed is not None and failed.retry_at is not None
        assert failed.failed_at is not None
        return failed.retry_at - failed.failed_at


def test_a_queue_producer_naming_a_retry_after_is_honoured() -> None:
    assert asyncio.run(_queue_retry_delay()) == 45_000

