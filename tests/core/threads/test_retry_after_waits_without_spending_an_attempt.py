"""``RetryAfter``: a step a provider turned away runs again when it asks, spending nothing.

A short wait is waited inside the Attempt; a long one suspends the submission on a durable
timer, so no handler is held while the provider recovers. Neither spends ``max_attempts`` nor
a try of the step's ``RetryPolicy``. A provider that never recovers is ended by the policy's
bounds (``max_waits``, ``max_wait_ms``), past which the ``RetryAfter`` is the step's failure.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from email.utils import format_datetime
from itertools import pairwise
from typing import Any

import pytest

from threadline import Application, RetryAfter, RetryPolicy, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.fetching import FetchRequest
from threadline.testing import FakeAnswer, FakeFetch, SimulatedObject
from threadline.threads.model import Outcome, StepEffect, SubmissionState, WaitKind
from threadline.threads.turn_base import INLINE_WAIT_MS

URL = "https://api.example.com/v1/chat/completions"
START = 1_000_000


class Provider:
    """Answers 429 with ``retry_after`` for the first ``refusals`` requests, then 200."""

    def __init__(self, clock: ManualClock, refusals: int, retry_after: Any) -> None:
        self.clock = clock
        self.refusals = refusals
        self.retry_after = retry_after
        self.at: list[int] = []

    def __call__(self, request: FetchRequest) -> FakeAnswer:
        self.at.append(self.clock.now_ms())
        if len(self.at) <= self.refusals:
            value = self.retry_after(self.clock) if callable(self.retry_after) else self.retry_after
            return FakeAnswer(429, {"Retry-After": value}, b'{"error": "rate limited"}')
        return FakeAnswer.of_json({"answer": len(self.at)})


def _app(config: RuntimeConfig | None = None, **step: Any) -> Application:
    app = Application(config or RuntimeConfig())

    @app.agent("chat")
    async def chat(turn: Turn) -> Any:
        async def call() -> Any:
            return (await turn.http.post(URL, json={})).raise_for_status().json()
        value = await turn.step("model", call, **step)
        return {"value": value, "attempt": turn.attempt}

    return app


async def _settle(obj: SimulatedObject, made: str, until: int) -> Any:
    await obj.run_alarms(until=until)
    return obj.submission(made)


def test_a_429_with_retry_after_2_is_tried_again_2_s_later_in_the_same_attempt() -> None:
    clock = ManualClock(START)
    provider = Provider(clock, refusals=1, retry_after="2")

    async def scenario() -> Any:
        async with SimulatedObject(_app(), clock=clock, http=FakeFetch(provider)) as obj:
            made = obj.admit("t", "chat", {}).id
            return await _settle(obj, made, START + 60_000)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.COMPLETED
    assert done.result == {"value": {"answer": 2}, "attempt": 1}
    assert done.attempts == 1
    assert provider.at[1] - provider.at[0] == 2_000


def test_a_long_retry_after_suspends_on_a_durable_timer_and_resumes_when_it_asked() -> None:
    clock = ManualClock(START)
    provider = Provider(clock, refusals=1, retry_after="90")

    async def scenario() -> Any:
        async with SimulatedObject(_app(), clock=clock, http=FakeFetch(provider)) as obj:
            made = obj.admit("t", "chat", {}).id
            waiting = await _settle(obj, made, START + 30_000)
            assert waiting.state is SubmissionState.SUSPENDED
            [timer] = obj.waits(made)
            assert timer.kind is WaitKind.TIMER
            assert timer.wake_at == provider.at[0] + 90_000
            # Nothing holds the object while it waits: the alarm is the timer's.
            assert obj.alarm_at == timer.wake_at
            await obj.evict()
            return await _settle(obj, made, START + 600_000)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.COMPLETED
    assert done.result == {"value": {"answer": 2}, "attempt": 1}
    assert done.attempts == 1
    assert provider.at[1] - provider.at[0] == 90_000


def test_an_http_date_retry_after_is_measured_from_when_the_answer_came() -> None:
    clock = ManualClock(1_700_000_000_000)

    def in_ten_minutes(clock: ManualClock) -> str:
        return format_datetime(datetime.fromtimestamp(clock.now_ms() // 1000 + 600, UTC),
                               usegmt=True)

    provider = Provider(clock, refusals=1, retry_after=in_ten_minutes)

    async def scenario() -> Any:
        async with SimulatedObject(_app(), clock=clock, http=FakeFetch(provider)) as obj:
            made = obj.admit("t", "chat", {}).id
            return await _settle(obj, made, clock.now_ms() + 3_600_000)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.COMPLETED
    assert 599_000 <= provider.at[1] - provider.at[0] <= 600_000


def test_an_uncertain_step_turned_away_waits_and_runs_again_never_an_unknown_outcome() -> None:
    clock = ManualClock(START)
    provider = Provider(clock, refusals=2, retry_after="120")

    async def scenario() -> Any:
        async with SimulatedObject(_app(effect=StepEffect.UNCERTAIN), clock=clock,
                                   http=FakeFetch(provider)) as obj:
            made = obj.admit("t", "chat", {}).id
            return await _settle(obj, made, START + 3_600_000)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.COMPLETED
    assert done.attempts == 1
    assert [b - a for a, b in pairwise(provider.at)] == [120_000, 120_000]


def test_a_provider_that_never_recovers_is_ended_by_max_waits() -> None:
    clock = ManualClock(START)
    provider = Provider(clock, refusals=10**6, retry_after="1")
    policy = RetryPolicy(max_waits=3)

    async def scenario() -> Any:
        async with SimulatedObject(_app(RuntimeConfig(max_attempts=2), retry=policy),
                                   clock=clock, http=FakeFetch(provider)) as obj:
            made = obj.admit("t", "chat", {}).id
            return await _settle(obj, made, START + 3_600_000)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.FAILED
    assert done.error["type"] == "RetryAfter"
    assert done.error["message"] == ("retry after 1000 ms: https://api.example.com"
                                     " answered 429")
    # Each Attempt: one request and three more after waiting; then the Attempt failed.
    assert len(provider.at) == 8
    assert done.attempts == 2


def test_a_wait_longer_than_max_wait_ms_is_the_steps_failure_at_once() -> None:
    clock = ManualClock(START)
    provider = Provider(clock, refusals=10**6, retry_after="7200")

    async def scenario() -> Any:
        async with SimulatedObject(_app(RuntimeConfig(max_attempts=1)), clock=clock,
                                   http=FakeFetch(provider)) as obj:
            made = obj.admit("t", "chat", {}).id
            return await _settle(obj, made, START + 60_000)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.FAILED
    assert done.error["type"] == "RetryAfter"
    assert len(provider.at) == 1


def test_retry_after_raised_by_the_agents_own_code_in_a_step_waits_too() -> None:
    app = Application()
    tries: list[int] = []
    clock = ManualClock(START)

    @app.agent("own")
    async def own(turn: Turn) -> Any:
        def call() -> Any:
            tries.append(clock.now_ms())
            if len(tries) < 3:
                raise RetryAfter(0.25, reason="busy")
            return len(tries)
        return await turn.step("work", call, retry=RetryPolicy(max_attempts=1))

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=clock) as obj:
            made = obj.admit("t", "own", {}).id
            return await _settle(obj, made, START + 60_000)

    done = asyncio.run(scenario())
    assert done.result == 3
    assert done.attempts == 1
    assert [b - a for a, b in pairwise(tries)] == [250, 250]


def test_retry_after_outside_a_step_fails_the_attempt_retried_no_earlier_than_asked() -> None:
    app = Application(RuntimeConfig(max_attempts=2))
    runs: list[int] = []
    clock = ManualClock(START)

    @app.agent("bare")
    async def bare(turn: Turn) -> Any:
        runs.append(clock.now_ms())
        if len(runs) == 1:
            raise RetryAfter(300)
        return "done"

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=clock) as obj:
            made = obj.admit("t", "bare", {}).id
            return await _settle(obj, made, START + 3_600_000)

    done = asyncio.run(scenario())
    assert done.result == "done"
    assert done.attempts == 2
    assert runs[1] - runs[0] >= 300_000


def test_an_abort_during_a_short_wait_ends_the_submission_aborted() -> None:
    clock = ManualClock(START)
    provider = Provider(clock, refusals=10**6, retry_after=str(INLINE_WAIT_MS // 1000))

    async def scenario() -> Any:
        async with SimulatedObject(_app(), clock=clock, http=FakeFetch(provider)) as obj:
            made = obj.admit("t", "chat", {}).id
            first = asyncio.ensure_future(obj.run_alarms(until=START + 2_000))
            while not provider.at:
                await asyncio.sleep(0)
            obj.abort(made)
            await first
            return await _settle(obj, made, START + 600_000)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.ABORTED
    assert len(provider.at) == 1


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), True, "2", 367 * 86_400])
def test_retry_after_refuses_a_wait_that_is_not_a_finite_number_of_seconds(seconds: Any) -> None:
    with pytest.raises(ValueError, match="RetryAfter seconds"):
        RetryAfter(seconds)


def test_retry_after_rounds_its_wait_up_to_whole_milliseconds() -> None:
    assert RetryAfter(0.0011).delay_ms == 2
    assert RetryAfter(2).delay_ms == 2_000


@pytest.mark.parametrize("bad", [{"max_waits": -1}, {"max_waits": 101}, {"max_waits": True},
                                 {"max_wait_ms": -1}, {"max_wait_ms": 86_400_001}])
def test_a_retry_policy_bounds_its_waits(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="max_wait"):
        RetryPolicy(**bad)


def test_durable_waits_count_across_the_attempts_they_suspend() -> None:
    clock = ManualClock(START)
    provider = Provider(clock, refusals=10**6, retry_after="60")

    async def scenario() -> Any:
        async with SimulatedObject(_app(RuntimeConfig(max_attempts=1),
                                        retry=RetryPolicy(max_waits=2)),
                                   clock=clock, http=FakeFetch(provider)) as obj:
            made = obj.admit("t", "chat", {}).id
            return await _settle(obj, made, START + 3_600_000)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.FAILED
    assert done.error["type"] == "RetryAfter"
    # Two waits of 60 s on the timer, each resuming the step; the third refusal ends it.
    assert [b - a for a, b in pairwise(provider.at)] == [60_000, 60_000]


def test_a_wait_is_no_try_of_the_steps_retry_policy() -> None:
    app = Application(RuntimeConfig(max_attempts=1))
    tries: list[str] = []

    @app.agent("flaky")
    async def flaky(turn: Turn) -> Any:
        def call() -> Any:
            tries.append("try")
            if len(tries) <= 2:
                raise RetryAfter(0.1)
            if len(tries) == 3:
                raise ConnectionError("reset")
            return len(tries)
        return await turn.step("work", call, retry=RetryPolicy(max_attempts=2))

    async def scenario() -> Any:
        async with SimulatedObject(app, clock=ManualClock(START)) as obj:
            made = obj.admit("t", "flaky", {}).id
            return await _settle(obj, made, START + 60_000)

    done = asyncio.run(scenario())
    # Two waits, then the policy's two tries: the failed one and the one that returned.
    assert done.result == 4
