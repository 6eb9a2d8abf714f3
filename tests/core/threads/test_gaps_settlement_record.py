"""What one settlement writes besides the submission row, pinned exactly.

The ``submission.settled`` record is what consumers of the Thread's log read; its body
names the submission, the outcome and the result or the error, nothing else. Settling also
cancels the submission's open waits and applies its accepted abort at the settlement time, and
a column with nothing to say stays NULL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from threadline.app import Application
from threadline.config import RuntimeConfig
from threadline.errors import NonRetryable
from threadline.testing import SettlementLog, ThreadHarness
from threadline.threads import transitions
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.records import SUBMISSION_SETTLED
from threadline.threads.turn import Turn

MakeHarness = Callable[..., ThreadHarness]


def build(config: RuntimeConfig) -> Application:
    app = Application(config)

    @app.agent("answer")
    async def answer(turn: Turn) -> Any:
        return {"answer": turn.input}

    @app.agent("refuse")
    async def refuse(turn: Turn) -> Any:
        raise NonRetryable("no")

    @app.agent("ask")
    async def ask(turn: Turn) -> Any:
        return bool(await turn.approval("go"))

    return app


def _record(h: ThreadHarness, submission_id: str) -> dict[str, Any]:
    row = h.storage.exec("SELECT kind, thread_id, submission_id, body_json FROM tl_history"
                         " WHERE record_id = ?", f"{submission_id}:settled").one()
    assert (row["kind"], row["thread_id"], row["submission_id"]) == (
        SUBMISSION_SETTLED, "t", submission_id)
    body: dict[str, Any] = json.loads(row["body_json"])
    return body


def _columns(h: ThreadHarness, submission_id: str) -> dict[str, Any]:
    return h.storage.exec("SELECT result_json, error_json, settled_at FROM tl_submissions"
                          " WHERE id = ?", submission_id).one()


def test_a_completed_settlement_publishes_its_result(
    make_harness: MakeHarness, settlements: SettlementLog
) -> None:
    h = make_harness(build)
    sub = h.admit("t", 42, agent="answer")
    asyncio.run(h.runtime.process_thread_head("t"))
    assert _record(h, sub.id) == {
        "submission_id": sub.id, "outcome": "completed", "result": {"answer": 42}}
    columns = _columns(h, sub.id)
    assert columns["error_json"] is None and json.loads(columns["result_json"]) == {
        "answer": 42}
    assert columns["settled_at"] == h.clock.now_ms()
    assert settlements.count(sub.id) == 1


def test_a_failed_settlement_publishes_its_error(make_harness: MakeHarness) -> None:
    h = make_harness(build)
    sub = h.admit("t", None, agent="refuse")
    asyncio.run(h.runtime.process_thread_head("t"))
    body = _record(h, sub.id)
    assert set(body) == {"submission_id", "outcome", "error"}
    assert (body["submission_id"], body["outcome"]) == (sub.id, "failed")
    assert body["error"]["type"] == "NonRetryable" and body["error"]["message"] == "no"
    assert _columns(h, sub.id)["result_json"] is None


def test_aborting_a_suspended_submission_cancels_its_wait_and_applies_the_abort(
    make_harness: MakeHarness, settlements: SettlementLog
) -> None:
    h = make_harness(build)
    sub = h.admit("t", None, agent="ask")
    asyncio.run(h.runtime.process_thread_head("t"))
    assert h.get(sub.id).state is SubmissionState.SUSPENDED
    h.clock.advance(1_000)
    aborted = h.ledger.request_abort(sub.id)
    assert aborted.outcome is Outcome.ABORTED
    now = h.clock.now_ms()
    waits = h.storage.exec("SELECT state, resolved_at FROM tl_waits WHERE submission_id = ?",
                           sub.id).rows
    assert waits == [{"state": "cancelled", "resolved_at": now}]
    intent = h.ledger.read_abort_intent(sub.id)
    assert intent is not None and intent.applied_at == now
    assert _record(h, sub.id) == {
        "submission_id": sub.id, "outcome": "aborted",
        "error": {"type": "Aborted", "message": "aborted"}}
    assert settlements.count(sub.id) == 1


def test_move_refuses_to_settle(make_harness: MakeHarness) -> None:
    h = make_harness(build)
    sub = h.admit("t", None, agent="answer")
    with pytest.raises(ValueError, match=r"use settle\(\)"):
        transitions.move(h.storage, sub.id, state=SubmissionState.QUEUED, revision=0,
                         to=SubmissionState.SETTLED, now=h.clock.now_ms())
    assert h.get(sub.id).state is SubmissionState.QUEUED


def test_a_move_without_an_error_keeps_the_last_one(make_harness: MakeHarness) -> None:
    h = make_harness(build)
    sub = h.admit("t", None, agent="answer")
    now = h.clock.now_ms()
    assert transitions.move(h.storage, sub.id, state=SubmissionState.QUEUED, revision=0,
                            to=SubmissionState.READY, now=now, error={"type": "Boom"})
    assert transitions.move(h.storage, sub.id, state=SubmissionState.READY, revision=1,
                            to=SubmissionState.READY, now=now)
    assert h.get(sub.id).error == {"type": "Boom"}
