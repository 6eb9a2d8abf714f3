"""The submission ledger: admission, FIFO, idempotency, scans and aborts of queued work."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import Conflict, PayloadTooLarge, ValidationFailed
from threadline.scheduling import NATIVE
from threadline.storage import SqliteStorage, migrate
from threadline.testing import SettlementLog, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn

MakeHarness = Callable[..., ThreadHarness]


def echo_app(config: RuntimeConfig) -> Application:
    app = Application(config)

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return await turn.step("echo", lambda: turn.input)

    return app


def test_admission_is_fifo_per_thread_and_creates_the_thread(make_harness: MakeHarness) -> None:
    h = make_harness(echo_app)
    a1 = h.admit("a", 1)
    b1 = h.admit("b", 10)
    a2 = h.admit("a", 2)
    a3 = h.admit("a", 3)
    assert [a1.seq, a2.seq, a3.seq] == [1, 2, 3]
    assert b1.seq == 1
    assert a1.state is SubmissionState.QUEUED
    threads = h.storage.exec("SELECT id FROM tl_threads ORDER BY id").rows
    assert threads == [{"id": "a"}, {"id": "b"}]
    counts = h.storage.exec("SELECT thread_id, MAX(seq) AS n FROM tl_submissions"
                            " GROUP BY thread_id ORDER BY thread_id").rows
    assert counts == [{"thread_id": "a", "n": 3}, {"thread_id": "b", "n": 1}]
    scan = h.ledger.scan_nonterminal()
    assert [(i.thread_id, i.seq) for i in scan] == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]


def test_admission_commits_native_enrollment_and_alarm(make_harness: MakeHarness) -> None:
    h = make_harness(echo_app)
    h.storage.exec("UPDATE tl_lanes SET due_at = NULL, state = 'idle'")
    h.storage.delete_alarm()
    before = h.storage.exec("SELECT dirty FROM tl_maintenance").scalar()
    h.admit("a", 1)
    native = h.scheduler.due_queue.get(NATIVE)
    assert native is not None and native.due_at is not None
    assert native.due_at <= h.clock.now_ms()
    alarm = h.storage.known_alarm()
    assert alarm is not None and alarm <= h.clock.now_ms() + h.app.config.min_alarm_delay_ms
    assert h.storage.exec("SELECT dirty FROM tl_maintenance").scalar() > before


def test_threads_run_independently_in_fifo_order(make_harness: MakeHarness) -> None:
    h = make_harness(echo_app)
    subs = [h.admit("a", 1), h.admit("b", 2), h.admit("a", 3)]

    async def run() -> None:
        # The head of "a" runs; its follower waits for it, "b" does not.
        first = await h.runtime.process_thread_head("a")
        assert first is not None and first.result == 1
        other = await h.runtime.process_thread_head("b")
        assert other is not None and other.result == 2
        follower = await h.runtime.process_thread_head("a")
        assert follower is not None and follower.result == 3
        assert await h.runtime.process_thread_head("a") is None

    asyncio.run(run())
    assert [h.get(s.id).outcome for s in subs] == [Outcome.COMPLETED] * 3
    settled_order = h.storage.exec(
        "SELECT id FROM tl_submissions WHERE thread_id = 'a' ORDER BY settled_at, seq"
    ).rows
    assert [row["id"] for row in settled_order] == [subs[0].id, subs[2].id]


def test_idempotent_admission_returns_the_existing_submission(make_harness: MakeHarness) -> None:
    h = make_harness(echo_app)
    first = h.ledger.admit("a", "echo", {"q": 1, "z": [1, 2]}, "k1")
    again = h.ledger.admit("a", "echo", {"z": [1, 2], "q": 1}, "k1")
    assert first.created and not again.created
    assert again.submission.id == first.submission.id
    assert h.storage.exec("SELECT COUNT(*) AS n FROM tl_submissions").scalar() == 1
    # The same key in another Thread is another submission.
    assert h.ledger.admit("b", "echo", {"q": 1, "z": [1, 2]}, "k1").created


def test_key_reuse_with_other_input_or_agent_conflicts(make_harness: MakeHarness) -> None:
    h = make_harness(echo_app)
    h.ledger.admit("a", "echo", {"q": 1}, "k1")
    with pytest.raises(Conflict):
        h.ledger.admit("a", "echo", {"q": 2}, "k1")
    with pytest.raises(Conflict):
        h.ledger.admit("a", "other", {"q": 1}, "k1")
    assert h.storage.exec("SELECT COUNT(*) AS n FROM tl_submissions").scalar() == 1


def test_input_is_json_and_size_capped(make_harness: MakeHarness) -> None:
    h = make_harness(echo_app, RuntimeConfig(max_body_bytes=1024))
    with pytest.raises(PayloadTooLarge):
        h.admit("a", "x" * 2000)
    with pytest.raises(ValidationFailed):
        h.admit("a", {1, 2})
    with pytest.raises(ValidationFailed):
        h.admit("a", float("nan"))
    # JSON text may escape a lone surrogate ("\ud800"), but it has no UTF-8 form to store.
    with pytest.raises(ValidationFailed):
        h.admit("a", {"text": "\ud800"})
    with pytest.raises(ValidationFailed):
        h.admit("bad thread id!", 1)
    assert h.storage.exec("SELECT COUNT(*) AS n FROM tl_submissions").scalar() == 0
    assert h.storage.exec("SELECT COUNT(*) AS n FROM tl_threads").scalar() == 0


def test_abort_while_queued_settles_at_once(
    make_harness: MakeHarness, settlements: SettlementLog
) -> None:
    h = make_harness(echo_app)
    first, second = h.admit("a", 1), h.admit("a", 2)
    aborted = h.ledger.request_abort(first.id, "changed my mind")
    assert aborted.outcome is Outcome.ABORTED
    intent = h.ledger.read_abort_intent(first.id)
    assert intent is not None and intent.state.value == "applied"
    assert intent.reason == "changed my mind"
    with pytest.raises(ValidationFailed):
        h.ledger.request_abort(second.id, "bad byte \udc80")
    assert h.get(second.id).state is SubmissionState.QUEUED
    # Aborting again changes nothing.
    assert h.ledger.request_abort(first.id).revision == aborted.revision
    assert settlements.count(first.id) == h.settled_records(first.id) == 1
    settled = asyncio.run(h.drive())
    assert [s.submission_id for s in settled] == [second.id]


def test_scan_nonterminal_cost_is_flat_in_settled_history(clock: ManualClock) -> None:
    def measure(settled: int) -> tuple[int, int, int]:
        storage = SqliteStorage(":memory:", count_vm_steps=True)
        migrate(storage)
        h = ThreadHarness(storage, clock, lambda: echo_app(RuntimeConfig()))
        rows = [
            (f"old_{i:05d}", f"t{i % 50}", i + 1, "echo", None, "1", "d", "settled",
             "completed", 0, 0, 0)
            for i in range(settled)
        ]
        with storage._conn:  # bulk fixture data, not the code under test
            storage._conn.executemany(
                "INSERT OR IGNORE INTO tl_threads (id, created_at, updated_at) VALUES (?, 0, 0)",
                [(f"t{i}",) for i in range(50)],
            )
            storage._conn.executemany(
                "INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key,"
                " input_json, input_digest, state, outcome, created_at, updated_at, settled_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows,
            )
        for i in range(3):
            h.admit(f"open{i}", i)
        steps_before, read_before = storage.vm_steps, storage.meter.rows_read
        items = h.ledger.scan_nonterminal()
        assert len(items) == 3
        scan_steps = storage.vm_steps - steps_before
        scan_read = storage.meter.rows_read - read_before
        # The same question without the index, to show the measure notices examined rows.
        steps_before = storage.vm_steps
        storage.exec("SELECT id FROM tl_submissions WHERE outcome IS NULL")
        return scan_steps, scan_read, storage.vm_steps - steps_before

    small_steps, small_read, _ = measure(0)
    big_steps, big_read, unindexed_steps = measure(1000)
    assert unindexed_steps >= 1000
    assert small_read == big_read == 3
    # vm_steps grows with rows examined: a scan of 1,000 settled rows would cost thousands.
    assert big_steps <= small_steps + 64, (small_steps, big_steps)


def test_scan_uses_the_open_work_index(storage: SqliteStorage) -> None:
    from threadline.threads import ledger

    plan = storage.exec("EXPLAIN QUERY PLAN " + ledger._SCAN_OPEN).rows
    assert any("tl_submissions_open" in str(row["detail"]) for row in plan), plan
    plan = storage.exec("EXPLAIN QUERY PLAN " + ledger._THREAD_OPEN, "t", "t").rows
    assert any("tl_submissions_open" in str(row["detail"]) for row in plan), plan


def _check_values(storage: SqliteStorage, table: str, column: str) -> set[str]:
    """The values the CHECK on ``table.column`` lets through, read from the live schema."""
    sql = storage.exec("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                       table).scalar()
    # A column of the CREATE TABLE starts a line; one added later follows a comma.
    found = re.search(rf"(?:\n\s*|, ){column} TEXT[^\n]*?CHECK \(", sql)
    assert found is not None, (table, column)
    depth, end = 1, found.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(sql[end], 0)
        end += 1
    check = sql[found.end():end - 1]
    assert f"{column} IN (" in check, (table, column, check)
    return set(re.findall(r"'([^']*)'", check))


@pytest.mark.parametrize(("table", "column", "enum"), [
    ("tl_submissions", "state", "SubmissionState"),
    ("tl_submissions", "outcome", "Outcome"),
    ("tl_journal", "effect", "StepEffect"),
    ("tl_journal", "state", "StepState"),
    ("tl_waits", "kind", "WaitKind"),
    ("tl_waits", "state", "WaitState"),
    ("tl_abort_intents", "state", "AbortState"),
    ("tl_submissions", "loss_cause", "LossCause"),
])
def test_states_mirror_the_schema_checks(
    storage: SqliteStorage, table: str, column: str, enum: str
) -> None:
    from threadline.threads import model

    # Exactly the enum's values, in the CHECK of that very column (after every migration).
    members = {member.value for member in getattr(model, enum)}
    assert _check_values(storage, table, column) == members
