"""Progress ends a failing generation's backoff, also for a pass lost before its checkpoint.

A pass that begins under a pending native retry moves the native lane to its crash fallback,
``begin + backoff(stalls)``. Once one of its Attempts commits real progress the backoff is
over: lost after that (eviction, crash), the rest of its work is retried about ``min_delay``
later, not at the fallback.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadline import Application, Turn
from threadline.config import RuntimeConfig
from threadline.scheduling import NATIVE, NativeRetry, read_state
from threadline.scheduling import state as gen
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState

# One Thread at a time: the pass settles the first Thread before it starts the second.
CONFIG = RuntimeConfig(native_concurrency=1)
MIN_DELAY = CONFIG.min_alarm_delay_ms
TOLERANCE = 50


def _app() -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return {"got": turn.input}

    @app.agent("stepper")
    async def stepper(turn: Turn) -> Any:
        value = await turn.step("work", lambda: turn.input)
        return {"did": value}

    return app


async def _next_wake_after_a_loss(stalls: int) -> tuple[int, int]:
    """Lose a pass mid-Attempt after it settled another Thread; return (slot - now, fallback
    delay the pass had given the native lane)."""
    async with SimulatedObject(_app(), check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        first = obj.admit("a", "echo", "hi")
        second = obj.admit("b", "stepper", "x")
        at = obj.clock.now_ms()
        if stalls:
            dirty = read_state(obj.storage).dirty
            obj.storage.transaction(lambda: gen.set_retry(
                obj.storage, NativeRetry(dirty, at, True, stalls)))
        fallback: list[int] = []

        def look(location: str) -> None:
            lane = obj.space.scheduler.due_queue.get(NATIVE)
            assert lane is not None and lane.due_at is not None
            fallback.append(lane.due_at - obj.clock.now_ms())

        obj.failpoints.install("maintenance:begin:after", look)
        # Only "b" runs a step: the loss comes inside its Attempt, after "a" settled.
        crash = obj.crash_at("step:started")
        slot = obj.alarm_at
        assert slot is not None
        await obj.run_alarms(until=slot)
        assert crash.fired and obj.evictions == 1
        assert obj.submission(first.id).state is SubmissionState.SETTLED
        assert obj.submission(second.id).state is SubmissionState.RUNNING
        slot = obj.alarm_at
        assert slot is not None
        wake = slot - obj.clock.now_ms()
        # The rest is still served, and settles.
        await obj.run_alarms()
        assert obj.submission(second.id).result == {"did": "x"}
        return wake, fallback[0]


@pytest.mark.parametrize("stalls", [3, 8])
def test_a_pass_lost_after_progress_under_a_retry_is_retried_after_min_delay(
    stalls: int,
) -> None:
    wake, fallback = asyncio.run(_next_wake_after_a_loss(stalls))
    # The lost pass ran under the retry's backoff: its crash fallback was that far ahead.
    assert fallback >= CONFIG.alarm_backoff_base_ms << (stalls - 1)
    assert wake <= MIN_DELAY + TOLERANCE


def test_a_pass_lost_with_no_retry_pending_wakes_by_its_crash_fallback() -> None:
    wake, fallback = asyncio.run(_next_wake_after_a_loss(0))
    assert fallback <= CONFIG.alarm_backoff_base_ms
    # Nothing to end: the pass's own progress armed the empty slot at its crash fallback.
    assert wake == fallback
