"""``turn.sleep`` takes seconds (or a ``timedelta``), like :func:`asyncio.sleep`."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import ValidationFailed
from threadline.testing import ThreadHarness
from threadline.threads.model import SubmissionState
from threadline.threads.turn import MAX_SLEEP_SECONDS, Turn, sleep_ms

MakeHarness = Callable[..., ThreadHarness]


@pytest.mark.parametrize(
    ("duration", "ms"),
    [
        (0, 0),
        (5, 5_000),
        (1.1, 1_100),  # not 1101: the float is not multiplied and rounded up
        (0.0004, 1),  # a fraction of a millisecond rounds up
        (2.5, 2_500),
        (timedelta(minutes=2), 120_000),
        (timedelta(microseconds=1), 1),
        (MAX_SLEEP_SECONDS, MAX_SLEEP_SECONDS * 1_000),
        (timedelta(days=366), MAX_SLEEP_SECONDS * 1_000),
    ],
)
def test_sleep_duration_is_seconds_or_a_timedelta(duration: Any, ms: int) -> None:
    assert sleep_ms(duration) == ms


@pytest.mark.parametrize(
    ("duration", "rule"),
    [
        (MAX_SLEEP_SECONDS + 0.001, "at most 31622400 seconds"),
        (timedelta(days=366, milliseconds=1), "at most"),
        (10**20, "at most"),
        (1e300, "at most"),
        (-0.5, "negative"),
        (-1e300, "negative"),
        (timedelta(seconds=-1), "negative"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        (True, "a number of seconds"),
        ("5", "a number of seconds"),
    ],
)
def test_sleep_refusals_name_their_rule(duration: Any, rule: str) -> None:
    with pytest.raises(ValidationFailed, match=rule):
        sleep_ms(duration)


def test_a_number_sleeps_that_many_seconds_on_the_timer(
    make_harness: MakeHarness, clock: ManualClock
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("sleepy")
        async def sleepy(turn: Turn) -> Any:
            await turn.sleep(1.5)
            return "woke"

        return app

    h = make_harness(build)
    sub = h.admit("t", None, agent="sleepy")
    start = clock.now_ms()
    assert asyncio.run(h.runtime.process_thread_head("t")) is None
    assert h.get(sub.id).state is SubmissionState.SUSPENDED
    wake = h.storage.exec("SELECT wake_at FROM tl_waits WHERE submission_id = ?", sub.id).scalar()
    assert wake == start + 1_500
    clock.advance(1_499)
    asyncio.run(h.drive())
    assert h.get(sub.id).state is SubmissionState.SUSPENDED
    clock.advance(1)
    asyncio.run(h.drive())
    assert h.get(sub.id).result == "woke"
