"""The statements one busy settlement runs, pinned, and the rules that let it skip the others.

In workerd every statement crosses from Python into JavaScript and back; in a busy pass these
crossings and the Python around them are the object's time. A submission that runs one step
and emits one record runs these and no more: its claim (which returns the claimed row and its
abort intent's state), the step's journal read, fence and write, the Thread's records read,
fence, seq seek and append, then its settlement, its settled record (seek and append) and the
look for joined input. No read of the abort intent while no abort was requested
(:mod:`threadline.threads.abort_watch`), no read of the claimed or the admitted row, and no
cancelling of waits a running submission cannot have.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.storage import SqliteStorage
from threadline.storage.port import Rows
from threadline.testing import ThreadHarness
from threadline.threads import history, journal, ledger, waits
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn


def _recording(storage: SqliteStorage, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    statements: list[str] = []
    run = storage.exec

    def spy(sql: str, *params: Any) -> Rows:
        statements.append(" ".join(sql.split()))
        return run(sql, *params)

    monkeypatch.setattr(storage, "exec", spy)
    return statements


def _echo_app() -> Application:
    app = Application()

    @app.agent("echo")
    async def echo(turn: Turn) -> object:
        said = await turn.step("say", lambda: turn.input)
        await turn.emit({"said": said})
        return said

    return app


def test_a_settlement_with_one_step_and_one_record_runs_twelve_statements(
    storage: SqliteStorage, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = ThreadHarness(storage, clock, _echo_app)
    sub = harness.admit("t", "hi")
    thread_open = harness.ledger.thread_open("t")
    statements = _recording(storage, monkeypatch)
    with harness.ledger.prefetched("t", tuple(thread_open)):
        settled = asyncio.run(harness.runtime.process_thread_head("t"))
    assert settled is not None and settled.outcome is Outcome.COMPLETED
    # The gate's own bookkeeping (the lease deadline on the native lane, the generation) is
    # pinned by the scheduling tests; these are the submission's.
    statements = [sql for sql in statements
                  if "tl_lanes" not in sql and "tl_maintenance" not in sql]
    verbs = [sql.split(" ", 3)[:3] for sql in statements]
    assert verbs == [
        ["UPDATE", "tl_submissions", "SET"],          # the claim, RETURNING the row
        ["SELECT", "step_key,", "position,"],         # the step's journal entry
        ["SELECT", "state,", "revision,"],            # the fence of the journal write
        ["INSERT", "INTO", "tl_journal"],
        ["SELECT", "h.record_id", "FROM"],            # the submission's records
        ["SELECT", "state,", "revision,"],            # the fence of the append
        ["SELECT", "COALESCE(MAX(seq),", "0)"],       # the record's seq
        ["INSERT", "INTO", "tl_history"],
        ["UPDATE", "tl_submissions", "SET"],          # the settlement
        ["SELECT", "COALESCE(MAX(seq),", "0)"],
        ["INSERT", "INTO", "tl_history"],             # its submission.settled record
        ["SELECT", "id,", "revision"],                # input joined into it
    ], statements
    assert not any("tl_abort_intents" in sql for sql in statements[1:])
    assert not any("tl_waits" in sql for sql in statements)
    assert "RETURNING *" in statements[0] and "abort_state" in statements[0]
    assert harness.get(sub.id).outcome is Outcome.COMPLETED
    assert [row["kind"] for row in history.read_history(storage, "t")] == [
        "record", "submission.settled"]


def test_an_admission_runs_three_statements(
    storage: SqliteStorage, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Thread's row (written once), its next seq, then the submission, returned by its
    # INSERT as written: no read-back.
    harness = ThreadHarness(storage, clock, _echo_app)
    harness.admit("t", "first")
    statements = _recording(storage, monkeypatch)
    made = ledger.enqueue(storage, submission_id="s2", thread_id="t", agent="echo",
                          idempotency_key=None, input_json='"second"', input_digest="d",
                          now=clock.now_ms(), returning=True)
    assert len(statements) == 3 and statements[2].startswith("INSERT INTO tl_submissions")
    assert (made.id, made.seq, made.input, made.state) == ("s2", 2, "second",
                                                            SubmissionState.QUEUED)
    assert made == harness.get("s2")
    assert "RETURNING" in statements[2]
    # A caller that does not answer with the row (a delayed submission falling due, a
    # message) is not given it: RETURNING reads the row back, a row read in workerd.
    statements.clear()
    assert ledger.enqueue(storage, submission_id="s3", thread_id="t", agent="echo",
                          idempotency_key=None, input_json='"third"', input_digest="d",
                          now=clock.now_ms()) is None
    assert "RETURNING" not in statements[2]


def test_records_take_consecutive_seqs_per_thread(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    harness = ThreadHarness(storage, clock, _echo_app)
    harness.admit("a", None)
    harness.admit("b", None)
    now = clock.now_ms()
    seqs = [history.append_history(storage, record_id=f"r{i}", thread_id=thread,
                                   submission_id=None, kind="record", body_json="{}", now=now)
            for i, thread in enumerate(["a", "a", "b", "a", "b"])]
    assert seqs == [1, 2, 1, 3, 2]
    assert [row["seq"] for row in history.read_history(storage, "a")] == [1, 2, 3]


def test_an_abort_requested_while_the_agent_runs_is_seen_at_its_next_boundary(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    # The Attempt read "no abort" from its claim; the abort requested meanwhile (through the
    # ledger, which tells the watch) makes its next boundary read the intent again.
    app = Application()
    runs: list[str] = []

    @app.agent("two")
    async def two(turn: Turn) -> object:
        await turn.step("one", lambda: bool(harness.ledger.request_abort(turn.submission_id,
                                                                          "stop")))
        runs.append("past the first step")
        await turn.step("two", lambda: runs.append("second step ran"))
        return "done"

    harness = ThreadHarness(storage, clock, lambda: app)
    sub = harness.admit("t", None, agent="two")
    asyncio.run(harness.runtime.process_thread_head("t"))
    done = harness.get(sub.id)
    assert runs == ["past the first step"]
    assert (done.outcome, done.error) == (Outcome.ABORTED, {"type": "Aborted", "message": "stop"})


def test_an_abort_requested_after_the_last_boundary_wins_at_the_settlement(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    app = Application()

    @app.agent("late")
    async def late(turn: Turn) -> object:
        await turn.step("one", lambda: 1)
        harness.ledger.request_abort(turn.submission_id, "too late")
        return "finished anyway"

    harness = ThreadHarness(storage, clock, lambda: app)
    sub = harness.admit("t", None, agent="late")
    asyncio.run(harness.runtime.process_thread_head("t"))
    done = harness.get(sub.id)
    assert (done.outcome, done.result, done.error) == (
        Outcome.ABORTED, None, {"type": "Aborted", "message": "too late"})
    intent = harness.ledger.read_abort_intent(sub.id)
    assert intent is not None and intent.state.value == "applied"


def test_an_abort_intent_already_accepted_at_the_claim_is_seen_from_the_claims_own_row(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    # An intent this incarnation's ledger never wrote (an earlier incarnation's, here written
    # by hand): the watch has nothing to say, the claim's row tells it.
    app = Application()
    ran: list[str] = []

    @app.agent("work")
    async def work(turn: Turn) -> object:
        return await turn.step("one", lambda: ran.append("ran"))

    harness = ThreadHarness(storage, clock, lambda: app)
    sub = harness.admit("t", None, agent="work")
    storage.exec("INSERT INTO tl_abort_intents (submission_id, state, reason, requested_at)"
                 " VALUES (?, 'accepted', 'earlier', ?)", sub.id, clock.now_ms())
    asyncio.run(harness.runtime.process_thread_head("t"))
    done = harness.get(sub.id)
    assert ran == []
    assert (done.outcome, done.error) == (
        Outcome.ABORTED, {"type": "Aborted", "message": "earlier"})


def test_a_claimed_submission_never_has_an_open_wait(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    # What lets a settlement from running skip cancelling waits: every way back to running
    # (a timer, an approval, an Unknown Outcome resolved for a retry) leaves none open.
    app = Application()
    open_at_claim: list[int] = []

    @app.agent("waits")
    async def waiting(turn: Turn) -> object:
        open_at_claim.append(len(waits.open_waits(storage, turn.submission_id)))
        await turn.sleep(1)
        await turn.approval("go")
        await turn.step("mail", lambda: "sent", effect="uncertain")
        return "done"

    harness = ThreadHarness(storage, clock, lambda: app)
    sub = harness.admit("t", None, agent="waits")
    asyncio.run(harness.drive())
    clock.advance(1_000)
    asyncio.run(harness.drive())
    assert harness.get(sub.id).state is SubmissionState.SUSPENDED
    harness.ledger.decide_approval(sub.id, "go", approved=True)
    harness.failpoints.evict_at("step:started")
    with pytest.raises(Evicted):
        asyncio.run(harness.runtime.process_thread_head("t"))
    harness.evict()
    clock.advance(harness.app.config.lease_ms)
    asyncio.run(harness.drive())
    assert harness.get(sub.id).state is SubmissionState.UNKNOWN
    harness.ledger.resolve_unknown(sub.id, "retry")
    asyncio.run(harness.drive())
    done = harness.get(sub.id)
    assert done.outcome is Outcome.COMPLETED
    assert open_at_claim == [0, 0, 0, 0]
    assert journal.read_entry(storage, sub.id, "step:mail") is not None


def test_settling_a_suspended_submission_still_cancels_its_wait(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    app = Application()

    @app.agent("asks")
    async def asks(turn: Turn) -> object:
        await turn.approval("go")
        return "done"

    harness = ThreadHarness(storage, clock, lambda: app)
    sub = harness.admit("t", None, agent="asks")
    asyncio.run(harness.drive())
    assert [w.state.value for w in waits.open_waits(storage, sub.id)] == ["open"]
    harness.ledger.request_abort(sub.id)
    assert waits.open_waits(storage, sub.id) == []
    assert harness.get(sub.id).outcome is Outcome.ABORTED


def test_a_second_abort_in_one_incarnation_is_still_seen_by_a_running_attempt(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    # The watch counts every abort: one requested before this Attempt's claim (of another
    # submission) must not hide the one requested while it runs.
    app = Application()
    ran: list[str] = []

    @app.agent("two")
    async def two(turn: Turn) -> object:
        await turn.step("one", lambda: bool(harness.ledger.request_abort(turn.submission_id,
                                                                          "second")))
        await turn.step("two", lambda: ran.append("second step ran"))
        return "done"

    harness = ThreadHarness(storage, clock, lambda: app)
    other = harness.admit("elsewhere", None, agent="two")
    harness.ledger.request_abort(other.id, "first")
    sub = harness.admit("t", None, agent="two")
    asyncio.run(harness.runtime.process_thread_head("t"))
    done = harness.get(sub.id)
    assert ran == []
    assert (done.outcome, done.error) == (Outcome.ABORTED, {"type": "Aborted", "message": "second"})
