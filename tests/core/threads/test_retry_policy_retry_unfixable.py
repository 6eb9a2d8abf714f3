"""Errors no retry of the same code can fix (ImportError, NameError, SyntaxError) fail the
submission at once, unless the step's ``RetryPolicy(retry_unfixable=...)`` names their type:
then the step tries them again, and the Attempt they end is retried within ``max_attempts``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import pytest

from threadline import Application, NonRetryable, RetryPolicy, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, Submission

START = 1_000_000
LATER = START + 10**9


def _run(app: Application, agent: str) -> Submission:
    async def scenario() -> Submission:
        async with SimulatedObject(app, clock=ManualClock(START)) as obj:
            made = obj.admit("t", agent, {}).id
            await obj.run_alarms(until=LATER)
            return obj.submission(made)

    return asyncio.run(scenario())


def _flaky_import(calls: list[int], succeed_on: int | None) -> Any:
    def load() -> str:
        calls.append(len(calls) + 1)
        if succeed_on is None or len(calls) < succeed_on:
            raise ModuleNotFoundError("No module named 'provider_sdk'")
        return "loaded"

    return load


def test_an_unfixable_error_in_a_step_fails_the_submission_at_once_without_a_retry() -> None:
    calls: list[int] = []
    app = Application(RuntimeConfig(max_attempts=5))

    @app.agent("imports")
    async def imports(turn: Turn) -> Any:
        return await turn.step("load", _flaky_import(calls, None),
                               retry=RetryPolicy(max_attempts=3))

    done = _run(app, "imports")
    assert (done.outcome, done.attempts, calls) == (Outcome.FAILED, 1, [1])
    assert done.error["type"] == "ModuleNotFoundError"
    assert [(f.attempt, f.final) for f in done.failed_attempts] == [(1, True)]


def test_a_step_that_retries_unfixable_errors_tries_again_and_its_attempt_is_retried() -> None:
    calls: list[int] = []
    app = Application(RuntimeConfig(max_attempts=5))

    @app.agent("imports")
    async def imports(turn: Turn) -> Any:
        value = await turn.step("load", _flaky_import(calls, 5), retry=RetryPolicy(
            max_attempts=2, retry_unfixable=(ImportError,)))
        return {"value": value, "attempt": turn.attempt}

    done = _run(app, "imports")
    # Two tries in each of the first two Attempts, then the fifth call loads.
    assert (done.outcome, done.result) == (Outcome.COMPLETED, {"value": "loaded", "attempt": 3})
    assert calls == [1, 2, 3, 4, 5]
    assert [(f.attempt, f.type, f.final) for f in done.failed_attempts] == [
        (1, "ModuleNotFoundError", False), (2, "ModuleNotFoundError", False)]
    assert all(f.retry_at is not None and f.retry_at > f.at for f in done.failed_attempts)


def test_retried_unfixable_errors_still_end_once_max_attempts_is_spent() -> None:
    calls: list[int] = []
    app = Application(RuntimeConfig(max_attempts=3))

    @app.agent("imports")
    async def imports(turn: Turn) -> Any:
        return await turn.step("load", _flaky_import(calls, None), retry=RetryPolicy(
            retry_unfixable=(ModuleNotFoundError,)))

    done = _run(app, "imports")
    assert (done.outcome, done.attempts, len(calls)) == (Outcome.FAILED, 3, 3)
    assert [f.final for f in done.failed_attempts] == [False, False, True]


def test_the_same_error_raised_outside_such_a_step_or_of_another_type_is_still_final() -> None:
    app = Application(RuntimeConfig(max_attempts=5))
    allowed = RetryPolicy(max_attempts=2, retry_unfixable=(ImportError,))

    @app.agent("after_the_step")
    async def after_the_step(turn: Turn) -> Any:
        await turn.step("load", lambda: "loaded", retry=allowed)
        import provider_sdk_that_is_not_installed  # type: ignore[import-not-found]  # noqa: F401

    @app.agent("misnamed")
    async def misnamed(turn: Turn) -> Any:
        def call() -> Any:
            return undefined_helper()  # type: ignore[name-defined]  # noqa: F821

        return await turn.step("call", call, retry=allowed)

    @app.agent("caught")
    async def caught(turn: Turn) -> Any:
        with contextlib.suppress(ImportError):
            await turn.step("load", _flaky_import([], None), retry=allowed)
        raise NameError("name 'fallback' is not defined")

    for agent, kind in (("after_the_step", "ModuleNotFoundError"), ("misnamed", "NameError"),
                        ("caught", "NameError")):
        done = _run(app, agent)
        assert (done.outcome, done.attempts, done.error["type"]) == (Outcome.FAILED, 1, kind)


def test_non_retryable_wins_over_retry_unfixable() -> None:
    calls: list[int] = []
    app = Application(RuntimeConfig(max_attempts=5))

    @app.agent("imports")
    async def imports(turn: Turn) -> Any:
        return await turn.step("load", _flaky_import(calls, None), retry=RetryPolicy(
            max_attempts=3, retry_unfixable=(ImportError,),
            non_retryable=(ModuleNotFoundError,)))

    done = _run(app, "imports")
    assert (done.outcome, done.attempts, calls) == (Outcome.FAILED, 1, [1])


@pytest.mark.parametrize(
    "value", [(ValueError,), (NonRetryable,), ["ImportError"], ("ImportError",), ImportError,
              [ImportError], (ImportError, KeyError)])
def test_retry_unfixable_takes_only_a_tuple_of_unfixable_error_types(value: Any) -> None:
    with pytest.raises(ValueError, match="retry_unfixable must be a tuple of ImportError"):
        RetryPolicy(retry_unfixable=value)


def test_retry_unfixable_is_empty_by_default_and_frozen() -> None:
    policy = RetryPolicy(retry_unfixable=(ModuleNotFoundError, NameError, SyntaxError))
    assert RetryPolicy().retry_unfixable == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.retry_unfixable = ()  # type: ignore[misc]
    assert policy.retries_unfixable(IndentationError("x"))  # a SyntaxError
    assert not policy.retries_unfixable(ImportError("x"))  # its base class is not named
    assert not RetryPolicy().retries_unfixable(NameError("x"))
