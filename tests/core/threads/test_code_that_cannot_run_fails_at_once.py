"""Errors no retry can fix (a module that does not import, a name not defined, a syntax
error in code the agent compiles) fail the submission at once, spending one Attempt, where
any other exception is retried up to ``max_attempts``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadline import Application, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

CONFIG = RuntimeConfig(max_attempts=4)


def _imports(turn: Turn) -> Any:
    import threadline_no_such_module  # type: ignore[import-not-found]  # noqa: F401


def _names(turn: Turn) -> Any:
    return undefined_helper()  # type: ignore[name-defined]  # noqa: F821


def _compiles(turn: Turn) -> Any:
    return compile("def broken(:", "<agent>", "exec")


def _in_a_step(turn: Turn) -> Any:
    return turn.step("load", lambda: __import__("threadline_no_such_module"))


def _flaky(turn: Turn) -> Any:
    raise RuntimeError("the provider hung up")


@pytest.mark.parametrize(("body", "error", "attempts"), [
    (_imports, "ModuleNotFoundError", 1),
    (_names, "NameError", 1),
    (_compiles, "SyntaxError", 1),
    (_in_a_step, "ModuleNotFoundError", 1),
    (_flaky, "RuntimeError", CONFIG.max_attempts),
], ids=["import", "name", "syntax", "import-in-a-step", "other-errors-retry"])
def test_code_that_cannot_run_fails_the_submission_at_once(
    body: Any, error: str, attempts: int
) -> None:
    async def scenario() -> None:
        app = Application(CONFIG)

        @app.agent("agent")
        async def agent(turn: Turn) -> Any:
            result = body(turn)
            if asyncio.iscoroutine(result):
                await result

        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            done = obj.admit("t", "agent", {}).id
            await obj.run_alarms()
            failed = obj.submission(done)
            assert failed.outcome is Outcome.FAILED
            assert isinstance(failed.error, dict) and failed.error["type"] == error
            assert failed.attempts == attempts

    asyncio.run(scenario())
