"""A submission keeps the error of each failed Attempt, not only the latest: its number, type,
message, when it ended and what came next, the first and the latest ones, bounded in entries
and in bytes; lost and aborted Attempts add none."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from threadline import Application, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.testing import SimulatedObject
from threadline.threads.failed_attempts import (
    FAILURES_KEPT,
    MAX_FAILURE_ENTRY_BYTES,
    MAX_FAILURES_BYTES,
    failure_entry,
)
from threadline.threads.model import (
    MAX_ERROR_MESSAGE_CHARS,
    FailedAttempt,
    Outcome,
    SubmissionState,
)

START = 1_000_000
LATER = START + 10**9


#: The object the ``uncertain`` agent makes refuse its step's result.
turn_objects: list[SimulatedObject] = []


def _app(max_attempts: int) -> Application:
    app = Application(RuntimeConfig(max_attempts=max_attempts))

    @app.agent("flaky")
    async def flaky(turn: Turn) -> str:
        if turn.attempt == 3 and turn.input.get("third") == "ok":
            return "fine"
        kind = KeyError if turn.attempt % 2 else TimeoutError
        raise kind(f"try {turn.attempt}")

    @app.agent("lost_once")
    async def lost_once(turn: Turn) -> None:
        if turn.attempt == 1:
            raise Evicted("the object is lost under its first Attempt")
        raise ValueError(f"try {turn.attempt}")

    @app.agent("ugly")
    async def ugly(turn: Turn) -> None:
        # The worst a type and a message can be for their JSON: a control character is six
        # bytes escaped, a lone surrogate in the message kept as its escape seven.
        raise type("\x01" * 5_000, (Exception,), {})("\udc80" * 5_000)

    @app.agent("aborted")
    async def aborted(turn: Turn) -> None:
        turn_objects[0].abort(turn.submission_id, "not needed")
        await turn.step("next", lambda: None)  # a boundary: it observes the abort
        raise ValueError("never")

    @app.agent("uncertain")
    async def uncertain(turn: Turn) -> None:
        def charge() -> None:
            # Its result is refused: the step stays in flight, an Unknown Outcome.
            turn_objects[0].fail_statements("INSERT INTO tl_journal")

        await turn.step("charge", charge, effect="uncertain")

    return app


def _stored(obj: SimulatedObject, submission_id: str) -> Any:
    return obj.storage.exec("SELECT failures, failures_json FROM tl_submissions WHERE id = ?",
                            submission_id).one()


def test_each_failed_attempt_is_kept_with_its_error_and_what_came_next() -> None:
    async def scenario() -> tuple[Any, list[int]]:
        async with SimulatedObject(_app(3), clock=ManualClock(START)) as obj:
            made = obj.admit("t", "flaky", {}).id
            retries: list[int] = []
            while obj.submission(made).state is not SubmissionState.SETTLED:
                await obj.run_alarms(until=obj.clock.now_ms())
                current = obj.submission(made)
                if current.not_before is not None and current.not_before not in retries:
                    retries.append(current.not_before)
                obj.clock.advance(1_000)
            return obj.submission(made), retries

    done, retries = asyncio.run(scenario())
    assert done.outcome is Outcome.FAILED and done.failures == 3
    first, second, third = done.failed_attempts
    assert (first.attempt, first.type, first.message) == (1, "KeyError", "'try 1'")
    assert (second.attempt, second.type, second.message) == (2, "TimeoutError", "try 2")
    assert (third.attempt, third.type, third.message) == (3, "KeyError", "'try 3'")
    # The first two were retried, each when the submission's backoff said; the last is final.
    assert [(f.final, f.retry_at) for f in done.failed_attempts] == [
        (False, retries[0]), (False, retries[1]), (True, None)]
    assert first.at < first.retry_at <= second.at < second.retry_at <= third.at  # type: ignore[operator]
    assert done.error == {"type": "KeyError", "message": "'try 3'", "attempt": 3}


def test_a_submission_that_succeeds_after_failing_keeps_its_failures() -> None:
    async def scenario() -> Any:
        async with SimulatedObject(_app(5), clock=ManualClock(START)) as obj:
            made = obj.admit("t", "flaky", {"third": "ok"}).id
            await obj.run_alarms(until=LATER)
            return obj.submission(made)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.COMPLETED and done.result == "fine"
    assert done.failures == 2
    assert [(f.attempt, f.final) for f in done.failed_attempts] == [(1, False), (2, False)]


def test_only_the_first_and_the_latest_failures_are_kept_and_the_others_counted() -> None:
    async def scenario() -> tuple[Any, Any]:
        async with SimulatedObject(_app(14), clock=ManualClock(START)) as obj:
            made = obj.admit("t", "flaky", {}).id
            await obj.run_alarms(until=LATER)
            return obj.submission(made), _stored(obj, made)

    done, row = asyncio.run(scenario())
    assert done.failures == row["failures"] == 14
    assert len(done.failed_attempts) == FAILURES_KEPT == 10
    assert [f.attempt for f in done.failed_attempts] == [1, *range(6, 15)]
    assert [f.message for f in done.failed_attempts][:2] == ["'try 1'", "try 6"]
    assert done.failed_attempts[-1].final and not any(f.final for f in done.failed_attempts[:-1])


def test_each_kept_failure_is_bounded_in_bytes_whatever_its_message_and_type() -> None:
    async def scenario() -> tuple[Any, Any]:
        async with SimulatedObject(_app(12), clock=ManualClock(START)) as obj:
            made = obj.admit("t", "ugly", {}).id
            await obj.run_alarms(until=LATER)
            return obj.submission(made), _stored(obj, made)

    done, row = asyncio.run(scenario())
    assert done.outcome is Outcome.FAILED and done.failures == 12
    stored = row["failures_json"]
    assert len(stored.encode("utf-8")) <= MAX_FAILURES_BYTES
    entries = json.loads(stored)
    assert len(entries) == FAILURES_KEPT
    sizes = [len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
             for entry in entries]
    assert max(sizes) <= MAX_FAILURE_ENTRY_BYTES
    # Close to the bound: the bound is what these worst cases take, not a guess far above.
    assert max(sizes) > MAX_FAILURE_ENTRY_BYTES * 0.8
    assert all(len(entry["type"]) <= 200 for entry in entries)
    assert all(isinstance(f, FailedAttempt) for f in done.failed_attempts)
    # What is kept is what the submission's error says, not a second cut of it.
    assert done.failed_attempts[-1].message == done.error["message"]


def test_an_error_not_cut_by_the_envelope_is_cut_to_fit_its_entry() -> None:
    entry = failure_entry({"type": "Custom", "message": "\x01" * 100_000, "attempt": 2},
                          at=5, final=False, retry_at=9)
    assert entry is not None and len(entry.encode("utf-8")) <= MAX_FAILURE_ENTRY_BYTES
    decoded = json.loads(entry)
    assert (decoded["type"], decoded["attempt"], decoded["retry_at"]) == ("Custom", 2, 9)
    assert decoded["message"] == "\x01" * MAX_ERROR_MESSAGE_CHARS


def test_a_lost_attempt_adds_no_failure_and_an_unknown_outcome_is_listed_as_not_final() -> None:
    async def scenario() -> tuple[Any, Any]:
        async with SimulatedObject(_app(5), clock=ManualClock(START)) as obj:
            lost = obj.admit("t", "lost_once", {}).id
            await obj.run_alarms(until=LATER)
            after_loss = obj.submission(lost)
            turn_objects[:] = [obj]
            unknown = obj.admit("u", "uncertain", {}).id
            await obj.run_alarms(until=obj.clock.now_ms() + 1_000)
            return after_loss, obj.submission(unknown)

    after_loss, unknown = asyncio.run(scenario())
    assert (after_loss.outcome, after_loss.losses, after_loss.attempts) == (Outcome.FAILED, 1, 6)
    # Its five failures are listed; the loss before them is not.
    assert after_loss.failures == 5
    assert [(f.attempt, f.type) for f in after_loss.failed_attempts] == [
        (n, "ValueError") for n in range(2, 7)]
    assert unknown.state is SubmissionState.UNKNOWN
    [failed] = unknown.failed_attempts
    assert (failed.type, failed.final, failed.retry_at) == ("StorageError", False, None)


def test_an_aborted_attempt_adds_no_failure() -> None:
    async def scenario() -> Any:
        async with SimulatedObject(_app(5), clock=ManualClock(START)) as obj:
            turn_objects[:] = [obj]
            made = obj.admit("t", "aborted", {}).id
            await obj.run_alarms(until=LATER)
            return obj.submission(made)

    done = asyncio.run(scenario())
    assert done.outcome is Outcome.ABORTED and done.attempts == 1
    assert done.error == {"type": "Aborted", "message": "not needed"}
    assert (done.failures, done.failed_attempts) == (0, ())
