"""The rows the submission path writes, pinned statement by statement.

Workerd bills every row written, index entries included. The sqlite3 meter counts changed rows
only, so the index cost of a statement is pinned here from the statement's own program: the
b-trees it opens for writing and the instructions that insert into them.
"""

from __future__ import annotations

import asyncio

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import Evicted, StorageError
from threadline.storage import SqliteStorage
from threadline.storage.port import Rows
from threadline.testing import ThreadHarness
from threadline.threads import history, ledger, transitions, views
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn

_THREAD = "INSERT INTO tl_threads (id, created_at, updated_at) VALUES (?, ?, ?)"


def btrees_written(storage: SqliteStorage, sql: str) -> list[str]:
    """The tables and indexes ``sql``'s program may insert an entry into, one per instruction.

    An index whose WHERE the statement's columns cannot change is not even opened; a partial
    index the statement may enter is listed even when the row at hand stays out of it.
    """
    roots = {row["rootpage"]: row["name"] for row in storage.exec(
        "SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0")}
    program = storage.exec("EXPLAIN " + sql, *([None] * sql.count("?"))).rows
    cursors = {op["p1"]: roots[op["p2"]] for op in program
               if op["opcode"] == "OpenWrite" and op["p2"] in roots}
    return sorted(cursors[op["p1"]] for op in program
                  if op["opcode"] in ("Insert", "IdxInsert") and op["p1"] in cursors)


def test_claims_and_moves_leave_the_open_work_index_alone(storage: SqliteStorage) -> None:
    # Only settling a submission takes it out of open work: no other transition may rewrite
    # the index's entry (workerd bills that rewrite as one more row).
    for sql in (transitions._CLAIM, transitions._MOVE, transitions._LOSE,
                transitions._COUNT_LOSS):
        assert "tl_submissions_open" not in btrees_written(storage, sql), sql
    assert "tl_submissions_open" in btrees_written(storage, transitions._SETTLE)


def test_open_work_is_read_through_its_index(storage: SqliteStorage) -> None:
    # The predicate the reads name must be the index's own, or they scan settled history.
    for sql in (ledger._SCAN_OPEN, ledger._THREAD_OPEN, ledger._LIVE_THREADS, views._OPEN_PAGE,
                views._THREAD):
        plan = storage.exec("EXPLAIN QUERY PLAN " + sql, *([None] * sql.count("?"))).rows
        assert any("tl_submissions_open" in row["detail"] for row in plan), sql


_ADMIT = (
    "INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key, input_json,"
    " input_digest, state, created_at, updated_at) VALUES (?, 't', ?, 'a', ?, '{}', 'd',"
    " 'queued', 0, 0)"
)


def test_the_pass_reads_a_threads_open_work_as_two_ranges_without_a_sort(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    # An IN list is a table workerd bills the rows of, and a sort reads its rows again: the
    # pass asks for one Thread's open work several times per event.
    program = storage.exec("EXPLAIN " + ledger._THREAD_OPEN, None, None).rows
    assert not {"OpenEphemeral", "SorterOpen"} & {op["opcode"] for op in program}
    storage.exec(_THREAD, "t", 0, 0)
    for seq in (1, 2, 3):
        storage.exec(_ADMIT, f"s{seq}", seq, None)
    storage.exec("UPDATE tl_submissions SET state = 'suspended', dormant = 1 WHERE id = 's1'")
    harness = ThreadHarness(storage, clock, Application)
    # The dormant head comes from the second range, yet the Thread's work is in FIFO order.
    assert [item.seq for item in harness.runtime.ledger.thread_open("t")] == [1, 2, 3]


def test_a_claim_writes_the_submission_row_and_nothing_else(storage: SqliteStorage) -> None:
    # The row lives in its id's b-tree (no rowid table beside an index on id), and no index
    # names a column a claim sets: queued|ready -> running is one b-tree entry rewritten.
    assert btrees_written(storage, transitions._CLAIM) == ["tl_submissions"]
    assert btrees_written(storage, transitions._MOVE) == ["tl_submissions"]
    # So does readying a lost claim, the loss counted in the same row.
    assert btrees_written(storage, transitions._LOSE) == ["tl_submissions"]
    assert btrees_written(storage, transitions._COUNT_LOSS) == ["tl_submissions"]
    with pytest.raises(StorageError, match="rowid"):
        storage.exec("SELECT rowid FROM tl_submissions")
    # Crossing into or out of the dormant states moves the entry of the open-work index.
    assert "tl_submissions_open" in btrees_written(storage, transitions._MOVE_ACROSS)


def test_an_admission_writes_its_row_and_three_index_entries_at_most(
    storage: SqliteStorage,
) -> None:
    # The row, UNIQUE (thread_id, seq), the open-work index, and the idempotency key's index
    # only when there is a key: one open-work index serves both the pass and the views.
    written = set(btrees_written(storage, ledger._INSERT))
    assert len(written) == 4
    assert {"tl_submissions", "tl_submissions_key", "tl_submissions_open"} < written


def test_only_keyed_admissions_enter_the_idempotency_index(storage: SqliteStorage) -> None:
    indexes = {row["name"]: row for row in storage.exec("PRAGMA index_list('tl_submissions')")}
    key = indexes["tl_submissions_key"]
    assert (key["unique"], key["partial"]) == (1, 1)
    storage.exec(_THREAD, "t", 0, 0)
    for seq in (1, 2, 3):
        storage.exec(_ADMIT, f"s{seq}", seq, None)
    storage.exec(_ADMIT, "s4", 4, "k")
    with pytest.raises(StorageError, match="UNIQUE"):
        storage.exec(_ADMIT, "s5", 5, "k")
    keyed = storage.exec("SELECT id FROM tl_submissions INDEXED BY tl_submissions_key"
                         " WHERE thread_id = 't' AND idempotency_key IS NOT NULL").rows
    assert keyed == [{"id": "s4"}]


@pytest.mark.parametrize("to", [s for s in SubmissionState if s is not SubmissionState.SETTLED])
def test_dormant_follows_every_move(storage: SqliteStorage, to: SubmissionState) -> None:
    storage.exec(_THREAD, "t", 0, 0)
    for n, start in enumerate([s for s in SubmissionState if s is not SubmissionState.SETTLED]):
        sid = f"{start.value}-{to.value}"
        storage.exec(_ADMIT, sid, n + 1, None)
        storage.exec("UPDATE tl_submissions SET state = ?, dormant = ? WHERE id = ?",
                     start.value, int(start in transitions.DORMANT), sid)
        assert transitions.move(storage, sid, state=start, revision=0, to=to, now=5,
                                thread_id="t")
        dormant = storage.exec("SELECT dormant FROM tl_submissions WHERE id = ?", sid).scalar()
        assert dormant == int(to in transitions.DORMANT), sid
        live = {row["thread_id"] for row in storage.exec(ledger._LIVE_THREADS)}
        assert live == ({"t"} if to not in transitions.DORMANT else set()), sid
        assert transitions.settle(storage, sid, thread_id="t", state=to, revision=1,
                                  outcome=Outcome.COMPLETED, now=6)
        assert storage.exec("SELECT dormant FROM tl_submissions WHERE id = ?", sid).scalar() == 0


_OPEN_STATES = [s for s in SubmissionState if s is not SubmissionState.SETTLED]


@pytest.mark.parametrize("start", _OPEN_STATES)
@pytest.mark.parametrize("to", _OPEN_STATES)
def test_a_move_rewrites_the_open_work_index_only_when_it_crosses_dormant(
    storage: SqliteStorage, monkeypatch: pytest.MonkeyPatch, start: SubmissionState,
    to: SubmissionState,
) -> None:
    """One UPDATE of the row, which names ``dormant`` (an index entry more, billed) only when
    the move crosses into or out of the dormant states; only a move out of ``suspended``
    then looks for the input held behind it."""
    storage.exec(_THREAD, "t", 0, 0)
    storage.exec(_ADMIT, "s", 1, None)
    storage.exec("UPDATE tl_submissions SET state = ?, dormant = ? WHERE id = 's'",
                 start.value, int(start in transitions.DORMANT))
    statements: list[str] = []
    run = storage.exec

    def spy(sql: str, *params: object) -> Rows:
        statements.append(sql)
        return run(sql, *params)  # type: ignore[arg-type]

    monkeypatch.setattr(storage, "exec", spy)
    assert transitions.move(storage, "s", state=start, revision=0, to=to, now=5,
                            thread_id="t")
    crossing = (start in transitions.DORMANT) != (to in transitions.DORMANT)
    update = statements[0]
    monkeypatch.undo()
    assert ("tl_submissions_open" in btrees_written(storage, update)) == crossing
    released = [transitions._RELEASE] if start is SubmissionState.SUSPENDED else []
    assert statements[1:] == released


def test_only_a_threads_first_admission_writes_its_row(
    storage: SqliteStorage, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Application()

    @app.agent("echo")
    async def echo(turn: object) -> object:
        return None

    harness = ThreadHarness(storage, clock, lambda: app)
    first = harness.admit("t", 1, agent="echo")
    clock.advance(5)
    written: list[str] = []
    run = storage.exec

    def spy(sql: str, *params: object) -> Rows:
        rows = run(sql, *params)  # type: ignore[arg-type]
        if rows.changed and "tl_threads" in sql:
            written.append(sql)
        return rows

    monkeypatch.setattr(storage, "exec", spy)
    second = harness.admit("t", 2, agent="echo")
    third = harness.admit("u", 3, agent="echo")
    assert (first.seq, second.seq, third.seq) == (1, 2, 1)
    assert written == [ledger._CREATE_THREAD]  # Thread u's, not t's
    record = views.thread(storage, "t")
    assert record is not None
    assert (record.submissions, record.created_at, record.updated_at) == (
        2, first.created_at, second.created_at)
    assert [t.submissions for t in views.threads_page(storage, after=None, limit=5)] == [2, 1]


def _append(storage: SqliteStorage, thread_id: str, n: int, now: int) -> int:
    return history.append_history(
        storage, record_id=f"{thread_id}:r{n}", thread_id=thread_id, submission_id=None,
        kind="record", body_json="{}", now=now,
    )


def test_appending_a_record_writes_the_record_only(
    storage: SqliteStorage,
) -> None:
    storage.exec(_THREAD, "a", 10, 10)
    storage.exec(_THREAD, "b", 10, 10)
    before = storage.meter.reading()
    assert _append(storage, "a", 1, 20) == 1
    cost = storage.meter.reading() - before
    # No counter row of the Thread is rewritten: the next seq is read from the history's key.
    assert cost.rows_written == 1
    assert [_append(storage, "a", 2, 30), _append(storage, "b", 1, 40),
            _append(storage, "a", 3, 50)] == [2, 1, 3]
    a, b = views.thread(storage, "a"), views.thread(storage, "b")
    assert a is not None and b is not None
    assert (a.history_seq, a.updated_at, a.created_at) == (3, 50, 10)
    assert (b.history_seq, b.updated_at) == (1, 40)
    storage.exec(_THREAD, "c", 60, 60)
    c = views.thread(storage, "c")
    assert c is not None and (c.history_seq, c.updated_at) == (0, 60)
    assert [t.history_seq for t in views.threads_page(storage, after=None, limit=10)] == [3, 1, 0]


def test_a_lost_claim_is_counted_in_the_one_update_that_readies_it(
    storage: SqliteStorage, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting losses adds no row written: recovery rewrites the submission's row once, as
    it did before losses were counted, and an Attempt's normal end restarts the streak in
    the UPDATE that ends it (its settlement here), no statement more."""
    app = Application()

    @app.agent("echo")
    async def echo(turn: Turn) -> object:
        await turn.step("one", lambda: 1)
        return await turn.step("two", lambda: 2)

    harness = ThreadHarness(storage, clock, lambda: app)
    sub = harness.admit("t", None, agent="echo")
    harness.failpoints.evict_at("step:started", after=1)
    with pytest.raises(Evicted):
        asyncio.run(harness.runtime.process_thread_head("t"))
    harness.evict()
    written: list[str] = []
    run = storage.exec

    def spy(sql: str, *params: object) -> Rows:
        rows = run(sql, *params)  # type: ignore[arg-type]
        if rows.changed and "tl_submissions" in sql:
            written.append(sql)
        return rows

    monkeypatch.setattr(storage, "exec", spy)
    before = storage.meter.reading()
    harness.runtime.run_recovery("t")
    assert written == [transitions._LOSE]
    # The submission's row, and the gate's record of the native work it makes: as before.
    assert (storage.meter.reading() - before).rows_written == 2
    lost = harness.get(sub.id)
    assert (lost.state, lost.losses, lost.loss_streak, lost.loss_position) == (
        SubmissionState.READY, 1, 1, 1)
    written.clear()
    before = storage.meter.reading()
    asyncio.run(harness.runtime.process_thread_head("t"))
    assert written == [transitions._CLAIM, transitions._SETTLE]
    assert "loss" not in transitions._CLAIM
    done = harness.get(sub.id)
    assert (done.outcome, done.losses, done.loss_streak) == (Outcome.COMPLETED, 1, 0)
    # Five rows, as many as before the settlement restarted the streak.
    assert (storage.meter.reading() - before).rows_written == 5


def test_a_log_record_is_its_row_and_its_thread_seq_entry(storage: SqliteStorage) -> None:
    # Its row in the table (keyed by ``pos``, the rowid subscribers' cursors point at) and its
    # entry in UNIQUE (thread_id, seq), which keeps a Thread's seqs unique and serves reads
    # by Thread; no index of record ids (workerd bills each entry as a row).
    assert set(btrees_written(storage, history._INSERT_HISTORY)) == {
        "tl_history", "sqlite_autoindex_tl_history_1"}


def test_a_replayed_emit_finds_its_record_reading_only_the_log_since_the_first_claim(
    storage: SqliteStorage, clock: ManualClock
) -> None:
    app = Application()

    @app.agent("talk")
    async def talk(turn: Turn) -> object:
        await turn.emit({"said": turn.input})
        if turn.attempt == 1:
            raise RuntimeError("again")
        await turn.emit({"done": True})
        return None

    harness = ThreadHarness(storage, clock, lambda: app)
    # A long log before it: what the replay must not read.
    storage.exec(_THREAD, "t", 0, 0)
    for n in range(1, 201):
        history.append_history(storage, record_id=f"old:{n}", thread_id="t",
                               submission_id="old", kind="record", body_json="{}", now=0)
    sub = harness.admit("t", 1, agent="talk")
    asyncio.run(harness.runtime.process_thread_head("t"))
    # Between its Attempts another submission of the Thread settles (aborted while queued):
    # a record of the Thread, not of this submission, after its first claim.
    other = harness.admit("t", 2, agent="talk")
    harness.ledger.request_abort(other.id, "no")
    reads: list[int] = []
    run = storage.exec

    def spy(sql: str, *params: object) -> Rows:
        rows = run(sql, *params)  # type: ignore[arg-type]
        if sql == history._SUBMISSION_RECORDS:
            reads.append(rows.rows_read)
        return rows

    storage.exec = spy  # type: ignore[method-assign]
    clock.set(harness.get(sub.id).not_before or clock.now_ms())
    asyncio.run(harness.runtime.process_thread_head("t"))
    del storage.exec
    assert harness.get(sub.id).outcome is Outcome.COMPLETED
    logged = storage.exec("SELECT seq, record_id, kind FROM tl_history WHERE seq > 200"
                          " ORDER BY seq").rows
    assert [(row["record_id"], row["kind"]) for row in logged] == [
        (f"{sub.id}:emit", "record"), (f"{other.id}:settled", "submission.settled"),
        (f"{sub.id}:emit#2", "record"), (f"{sub.id}:settled", "submission.settled")]
    # One read for the second Attempt: its own record, not the 200 before its first claim.
    assert reads == [1]
    assert storage.exec("SELECT history_from FROM tl_submissions WHERE id = ?",
                        sub.id).scalar() == 200
