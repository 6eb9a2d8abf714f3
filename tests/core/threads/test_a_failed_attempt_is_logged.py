"""Every failed Attempt is logged once at ERROR: agent, submission, Thread, Attempt, what comes
next (a retry at a time, or failed for good), the error's type and message, and a traceback
bounded in frames and length."""

from __future__ import annotations

import asyncio
import logging

import pytest

from threadline import Application, NonRetryable, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.failure_log import TRACEBACK_CHARS, bounded_traceback
from threadline.threads.model import Outcome, SubmissionState

CONFIG = RuntimeConfig(max_attempts=2)


def _app() -> Application:
    app = Application(CONFIG)

    @app.agent("flaky")
    async def flaky(turn: Turn) -> None:
        raise ValueError("the provider answered nonsense")

    @app.agent("refuses")
    async def refuses(turn: Turn) -> None:
        raise NonRetryable("no such customer")

    @app.agent("fine")
    async def fine(turn: Turn) -> str:
        return "ok"

    return app


def _failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "threadline.threads" and r.levelno == logging.ERROR]


def test_each_failed_attempt_is_logged_with_what_comes_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.threads")

    async def scenario() -> tuple[str, str]:
        async with SimulatedObject(_app(), clock=ManualClock(1_000_000)) as obj:
            flaky = obj.admit("t", "flaky", {}).id
            refused = obj.admit("u", "refuses", {}).id
            obj.admit("v", "fine", {})
            await obj.run_alarms()
            assert obj.submission(flaky).outcome is Outcome.FAILED
            assert obj.submission(refused).outcome is Outcome.FAILED
            return flaky, refused

    flaky, refused = asyncio.run(scenario())
    lines = _failures(caplog)
    assert len(lines) == 3, lines  # two tries of flaky, one of refuses, nothing for fine
    first, last = [line for line in lines if flaky in line]
    assert first.startswith(f"threadline: agent 'flaky' failed attempt 1 of submission "
                            f"{flaky!r} in thread 't' (retried at ")
    assert "ValueError: the provider answered nonsense" in first
    assert "Traceback (most recent call last)" in first and "in flaky" in first
    assert "attempt 2" in last and "(the submission failed for good)" in last
    [only] = [line for line in lines if refused in line]
    assert "attempt 1" in only and "(the submission failed for good)" in only
    assert "NonRetryable: no such customer" in only


def test_a_deep_traceback_is_cut_to_its_last_frames_and_a_bounded_length() -> None:
    def deep(n: int) -> None:
        if n == 0:
            raise RuntimeError("x" * 10_000)
        deep(n - 1)

    try:
        deep(200)
    except RuntimeError as exc:
        text = bounded_traceback(exc)
    assert len(text) <= TRACEBACK_CHARS + 40
    assert text.startswith("... (") and text.endswith("x" * 100)
    # Thirty distinct frames (repeated identical ones would be folded by the formatter).
    chain: dict[str, object] = {}
    exec("def f0():\n    raise RuntimeError('short')\n"
         + "".join(f"def f{n}():\n    f{n - 1}()\n" for n in range(1, 30)), chain)
    try:
        chain["f29"]()  # type: ignore[operator]
    except RuntimeError as exc:
        text = bounded_traceback(exc)
    assert text.count("in f") == 12 and "in f0" in text and "in f11" in text
    assert "in f12" not in text


def test_an_attempt_that_fails_with_an_uncertain_step_in_flight_is_logged_as_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.threads")
    app = Application(CONFIG)
    objects: list[SimulatedObject] = []

    @app.agent("charges")
    async def charges(turn: Turn) -> None:
        def charge() -> None:
            # Its result is refused: the step stays in flight, so an operator decides.
            objects[0].fail_statements("INSERT INTO tl_journal")

        await turn.step("charge", charge, effect="uncertain")

    async def scenario() -> str:
        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            objects.append(obj)
            made = obj.admit("t", "charges", {}).id
            await obj.run_alarms()
            assert obj.submission(made).state is SubmissionState.UNKNOWN
            return made

    made = asyncio.run(scenario())
    [line] = _failures(caplog)
    assert line.startswith(f"threadline: agent 'charges' failed attempt 1 of submission "
                           f"{made!r} in thread 't' (an Unknown Outcome: an uncertain step was"
                           " in flight): StorageError: ")
