"""Recovery decisions, their reports and the journal rows they rest on, pinned exactly.

Earlier tests looked at a decision's kind only; these pin which submission a report names,
the error a lost Attempt leaves, the key and payload of an Unknown Outcome's wait, the journal
columns recovery reads, the publication of a recovered settlement, and decisions no earlier
test reached (a terminalizing submission, a due timer beside another open wait).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from threadline.app import Application
from threadline.config import RuntimeConfig
from threadline.errors import Evicted
from threadline.scheduling import PUBLICATION
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads import history, transitions, waits
from threadline.threads.model import LossCause, Outcome, SubmissionState, WaitKind
from threadline.threads.recovery import (
    Disposition,
    RecoveryBlocked,
    RecoveryDecision,
    RecoveryReport,
    RecoverySweepResult,
)
from threadline.threads.turn import Turn

MakeHarness = Callable[..., ThreadHarness]


def build(effects: Effects) -> Callable[[RuntimeConfig], Application]:
    def make(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("fetch")
        async def fetch(turn: Turn) -> Any:
            return await turn.step("fetch", lambda: effects.hit("fetch"))

        @app.agent("mail")
        async def mail(turn: Turn) -> Any:
            return await turn.step("email", lambda: effects.hit("email"), effect="uncertain")

        @app.agent("nap")
        async def nap(turn: Turn) -> Any:
            await turn.sleep(1)  # seconds
            return "rested"

        return app

    return make


def _lose(h: ThreadHarness, agent: str) -> tuple[str, int]:
    """Admit, lose the object while the step is in flight; return the id and claimed revision."""
    sub = h.admit("t", None, agent=agent)
    h.failpoints.evict_at("step:started")
    with pytest.raises(Evicted):
        asyncio.run(h.runtime.process_thread_head("t"))
    revision = h.get(sub.id).revision
    h.evict()
    h.clock.advance(h.app.config.lease_ms)
    return sub.id, revision


def _reset_error(attempt: int) -> dict[str, Any]:
    return {"type": "AttemptLost", "cause": "reset",
            "message": "the Attempt was lost to a reset of the object (a deploy, an eviction or"
                       " a crash) before it settled; retried without spending max_attempts",
            "attempt": attempt, "in_a_row": 1, "position": 0}


def _require_publication(h: ThreadHarness) -> None:
    """Publication is enrolled only while some destination requires it; these tests do."""
    h.scheduler.gate.publication_required = True


def _publication_due(h: ThreadHarness) -> bool:
    lane = h.scheduler.due_queue.get(PUBLICATION)
    return lane is not None and lane.due_at is not None


def _journal(h: ThreadHarness, sub_id: str) -> dict[str, Any]:
    return h.storage.exec("SELECT state, attempt, error_json, started_at, finished_at"
                          " FROM tl_journal WHERE submission_id = ?", sub_id).one()


def test_a_lost_attempt_is_readied_with_the_reset_recorded(
    make_harness: MakeHarness, effects: Effects
) -> None:
    h = make_harness(build(effects))
    sub_id, _ = _lose(h, "fetch")
    result = h.runtime.run_recovery("t")
    assert result == RecoverySweepResult((
        RecoveryReport(sub_id, "t", RecoveryDecision.RE_READY, Disposition.REPAIRED),))
    readied = h.get(sub_id)
    assert readied.state is SubmissionState.READY and readied.error == _reset_error(1)
    assert (readied.losses, readied.loss_streak, readied.loss_position, readied.loss_cause) == (
        1, 1, 0, LossCause.RESET)


def test_a_crash_loop_settled_by_recovery_is_published(
    make_harness: MakeHarness, effects: Effects, settlements: SettlementLog
) -> None:
    h = make_harness(build(effects), RuntimeConfig(max_consecutive_losses=1))
    sub_id, _ = _lose(h, "fetch")
    _require_publication(h)
    assert not _publication_due(h)
    assert h.runtime.run_recovery("t").reports == (
        RecoveryReport(sub_id, "t", RecoveryDecision.SETTLE_FAILED, Disposition.SETTLED),)
    failed = h.get(sub_id)
    assert failed.outcome is Outcome.FAILED and failed.error["type"] == "CrashLoop"
    assert failed.losses == 1
    # The settled record waits for the publication lane: it must be due with it.
    assert _publication_due(h)
    assert settlements.count(sub_id) == h.settled_records(sub_id) == 1


def test_an_uncertain_step_lost_in_flight_opens_its_own_keyed_wait(
    make_harness: MakeHarness, effects: Effects
) -> None:
    h = make_harness(build(effects))
    sub_id, revision = _lose(h, "mail")
    entry = _journal(h, sub_id)
    assert (entry["state"], entry["attempt"], entry["finished_at"]) == ("started", 1, None)
    assert h.runtime.run_recovery("t").reports == (
        RecoveryReport(sub_id, "t", RecoveryDecision.UNKNOWN_OUTCOME, Disposition.UNKNOWN,
                       "step:email"),)
    wait = h.storage.exec("SELECT kind, wait_key, state, payload_json FROM tl_waits"
                          " WHERE submission_id = ?", sub_id).one()
    assert (wait["kind"], wait["wait_key"], wait["state"]) == (
        "unknown", f"step:email@{revision}", "open")
    assert json.loads(wait["payload_json"]) == {"step": "step:email", "attempt": 1}
    # Nothing failed: the lost Attempt leaves no error on an Unknown Outcome. It is a loss,
    # counted as one, never charged against max_attempts.
    parked = h.get(sub_id)
    assert parked.error is None
    assert (parked.losses, parked.loss_cause) == (1, LossCause.RESET)

    # Resolving it for a retry fails the started entry, with the reason and the time.
    h.clock.advance(7)
    h.ledger.resolve_unknown(sub_id, "retry")
    entry = _journal(h, sub_id)
    assert entry["state"] == "failed" and entry["finished_at"] == h.clock.now_ms()
    assert json.loads(entry["error_json"]) == {"type": "UnknownOutcome", "resolution": "retry"}


def test_journal_rows_record_when_and_how_a_step_ended(
    make_harness: MakeHarness, effects: Effects
) -> None:
    def make(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("pay")
        async def pay(turn: Turn) -> Any:
            def charge() -> int:
                if effects.hit("charge") == 1:
                    raise ConnectionError("refused")
                return 1

            return await turn.step("charge", charge, effect="uncertain")

        return app

    h = make_harness(make)
    sub = h.admit("t", None, agent="pay")
    asyncio.run(h.runtime.process_thread_head("t"))
    failed = _journal(h, sub.id)
    assert (failed["state"], failed["finished_at"]) == ("failed", h.clock.now_ms())
    error = json.loads(failed["error_json"])
    assert (error["type"], error["message"]) == ("ConnectionError", "refused")
    h.clock.set(h.get(sub.id).not_before)
    asyncio.run(h.runtime.process_thread_head("t"))
    finished = _journal(h, sub.id)
    assert (finished["state"], finished["attempt"]) == ("finished", 2)
    assert finished["finished_at"] == h.clock.now_ms()


def test_a_terminalizing_submission_is_settled_aborted_by_recovery(
    make_harness: MakeHarness, effects: Effects, settlements: SettlementLog
) -> None:
    h = make_harness(build(effects))
    _require_publication(h)
    sub = h.admit("t", None, agent="fetch")
    assert transitions.move(h.storage, sub.id, state=SubmissionState.QUEUED, revision=0,
                            to=SubmissionState.TERMINALIZING, now=h.clock.now_ms())
    assert h.runtime.run_recovery("t").reports == (
        RecoveryReport(sub.id, "t", RecoveryDecision.SETTLE_ABORTED, Disposition.SETTLED),)
    assert h.get(sub.id).outcome is Outcome.ABORTED
    assert _publication_due(h)
    assert settlements.count(sub.id) == 1 and effects.calls == {}


def test_a_due_timer_wakes_its_submission_and_is_resolved(
    make_harness: MakeHarness, effects: Effects
) -> None:
    h = make_harness(build(effects))
    sub = h.admit("t", None, agent="nap")
    asyncio.run(h.runtime.process_thread_head("t"))
    h.clock.advance(1_000)
    assert h.runtime.run_recovery("t").reports == (
        RecoveryReport(sub.id, "t", RecoveryDecision.APPLY_TIMER, Disposition.REPAIRED),)
    timer = h.storage.exec("SELECT state, resolved_at FROM tl_waits WHERE submission_id = ?",
                           sub.id).one()
    assert timer == {"state": "resolved", "resolved_at": h.clock.now_ms()}
    assert h.get(sub.id).state is SubmissionState.READY


def test_a_due_timer_beside_another_open_wait_does_not_wake_its_submission(
    make_harness: MakeHarness, effects: Effects
) -> None:
    h = make_harness(build(effects))
    sub = h.admit("t", None, agent="nap")
    asyncio.run(h.runtime.process_thread_head("t"))
    h.storage.transaction(lambda: waits.open_wait(
        h.storage, "wait-extra", sub.id, WaitKind.APPROVAL, "extra", thread_id="t",
        now=h.clock.now_ms()))
    h.clock.advance(1_000)
    assert h.runtime.run_recovery("t").reports == ()
    assert h.get(sub.id).state is SubmissionState.SUSPENDED
    assert len(waits.open_waits(h.storage, sub.id)) == 2


def test_sweep_results_merge_reports_and_blocked_threads() -> None:
    first = RecoveryReport("s1", "a", RecoveryDecision.RE_READY, Disposition.REPAIRED)
    second = RecoveryReport("s2", "b", RecoveryDecision.APPLY_TIMER, Disposition.REPAIRED)
    stuck = RecoveryBlocked("c", "disk I/O error", "StorageError")
    merged = RecoverySweepResult((first,)).merge(RecoverySweepResult((second,), (stuck,)))
    assert merged == RecoverySweepResult((first, second), (stuck,))


def test_history_reads_page_after_a_sequence(make_harness: MakeHarness) -> None:
    def make(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("chat")
        async def chat(turn: Turn) -> Any:
            for n in range(3):
                await turn.emit({"n": n})
            return None

        return app

    h = make_harness(make)
    h.admit("t", None, agent="chat")
    h.admit("other", None, agent="chat")
    asyncio.run(h.drive())
    page = history.read_history(h.storage, "t")
    assert [(row["seq"], json.loads(str(row["body_json"]))) for row in page[:3]] == [
        (1, {"n": 0}), (2, {"n": 1}), (3, {"n": 2})]
    assert [(row["seq"], row["kind"]) for row in page[3:]] == [(4, "submission.settled")]
    assert [row["seq"] for row in history.read_history(h.storage, "t", after=1, limit=1)] == [2]
