"""A pass report says which Attempts failed while the pass ran (a count and the latest ten:
submission, Thread, agent, Attempt, error type), apart from why the pass itself failed; a
failed pass stores them with its report, so the next incarnation lists them too."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadline import Application, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.errors import StorageError
from threadline.maintenance import PassPhase, maintenance_pass
from threadline.testing import SimulatedObject
from threadline.threads.failure_log import LISTED_FAILURES, AttemptFailure

START = 1_000_000


def _app() -> Application:
    app = Application(RuntimeConfig(max_attempts=2))

    @app.agent("flaky")
    async def flaky(turn: Turn) -> None:
        raise (KeyError if turn.attempt == 1 else TimeoutError)("the provider")

    @app.agent("fine")
    async def fine(turn: Turn) -> str:
        return "ok"

    return app


def test_a_pass_names_the_attempts_that_failed_while_it_ran() -> None:
    async def scenario() -> tuple[list[str], list[Any]]:
        async with SimulatedObject(_app(), clock=ManualClock(START)) as obj:
            made = [obj.admit("t1", "flaky", {}).id, obj.admit("t2", "fine", {}).id,
                    obj.admit("t3", "flaky", {}).id]
            reports = await obj.run_alarms(until=START + 60_000)
            return made, reports

    (one, _, three), reports = asyncio.run(scenario())
    first, *later = (r for r in reports if r.phase is not PassPhase.CAUGHT_UP)
    assert (first.phase, first.failure_type, first.settled) == (PassPhase.ACTIONABLE, None, 1)
    assert first.attempts_failed == 2
    assert set(first.failed_attempts) == {AttemptFailure(one, "t1", "flaky", 1, "KeyError"),
                                          AttemptFailure(three, "t3", "flaky", 1, "KeyError")}
    # The retries failed for good in later passes, which name them in their turn.
    assert sum(r.attempts_failed for r in later) == 2
    assert {(f.submission_id, f.attempt, f.error_type) for r in later
            for f in r.failed_attempts} == {(one, 2, "TimeoutError"), (three, 2, "TimeoutError")}
    assert all(r.failure_type is None for r in later)


def test_every_failed_attempt_of_a_pass_is_counted_and_the_latest_listed() -> None:
    async def scenario() -> Any:
        async with SimulatedObject(_app(), clock=ManualClock(START)) as obj:
            for n in range(LISTED_FAILURES + 3):
                obj.admit(f"t{n:02}", "flaky", {})
            [report] = await obj.run_alarms(until=START + 500)
            return report

    report = asyncio.run(scenario())
    assert report.attempts_failed == LISTED_FAILURES + 3
    assert len(report.failed_attempts) == LISTED_FAILURES
    assert len({f.submission_id for f in report.failed_attempts}) == LISTED_FAILURES


def test_a_failed_pass_stores_the_attempts_it_saw_fail_for_the_next_incarnation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def refused(*args: object) -> None:
        raise StorageError("disk full")

    async def scenario() -> tuple[str, Any, list[Any]]:
        async with SimulatedObject(_app(), clock=ManualClock(START)) as obj:
            made = obj.admit("t1", "flaky", {}).id
            # Native work ran (and its Attempt failed) before the checkpoint failed the pass.
            monkeypatch.setattr(maintenance_pass, "checkpoint", refused)
            [failed] = await obj.run_alarms(until=START + 500)
            monkeypatch.undo()
            await obj.evict()
            return made, failed, obj.space.maintenance.reports.listed()

    made, failed, listed = asyncio.run(scenario())
    assert (failed.phase, failed.failure_type) == (PassPhase.FAILED, "StorageError")
    assert failed.attempts_failed == 1
    assert failed.failed_attempts == (AttemptFailure(made, "t1", "flaky", 1, "KeyError"),)
    assert listed == [failed]
