"""A caught-up pass reads the same rows and writes at most its alarm decision, however much
settled history the object holds."""

from __future__ import annotations

import pytest
from pass_support import Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.storage import SqliteStorage

_THREAD = (
    "INSERT INTO tl_threads (id, next_seq, created_at, updated_at) VALUES (?, ?, 0, 0)"
)
_SETTLED = (
    "INSERT INTO tl_submissions (id, thread_id, seq, agent, input_json, input_digest, state,"
    " outcome, result_json, created_at, updated_at, settled_at)"
    " VALUES (?, ?, ?, 'echo', '{}', 'd', 'settled', 'completed', '{}', 0, 0, 0)"
)


def _caught_up_cost(settled: int, clock: ManualClock) -> tuple[int, int, int, int]:
    storage = SqliteStorage(":memory:")

    async def body() -> tuple[int, int, int, int]:
        obj = Obj(storage, clock, echo_app)
        await obj.start()
        obj.admit("live", {"n": 0})  # one real submission, settled by the pass
        await obj.run()

        def fill() -> None:
            threads = max(1, settled // 100)
            for t in range(threads):
                storage.exec(_THREAD, f"t{t}", 101)
            for n in range(settled):
                storage.exec(_SETTLED, f"s{n}", f"t{n % threads}", n // threads + 1)

        storage.transaction(fill)
        # A lane of its own is due: the alarm fires while native work is caught up.
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())

        async def idle(now: int, deadline: int) -> int | None:
            return None

        obj.space.lanes.register("probe.lane", idle, dispatch_timeout_ms=1_000)
        clock.advance(1_000)
        before = obj.cost()
        report = await obj.fire()
        cost = obj.cost() - before
        assert report.phase is PassPhase.CAUGHT_UP
        assert (report.rows_read, report.rows_written) == (cost.rows_read, cost.rows_written)
        # The slot itself was written once (the decision), and only the lane was completed.
        before = obj.cost()
        clock.advance(1_000)
        quiet = await obj.fire()
        quiet_cost = obj.cost() - before
        assert quiet.phase is PassPhase.CAUGHT_UP
        return quiet_cost.rows_read, quiet_cost.rows_written, quiet_cost.alarm_writes, (
            quiet_cost.statements)

    try:
        return run(body())  # type: ignore[no-any-return]
    finally:
        storage.close()


def test_caught_up_pass_cost_does_not_grow_with_settled_history(clock: ManualClock) -> None:
    costs = {n: _caught_up_cost(n, clock) for n in (10, 1_000, 10_000)}
    assert costs[10] == costs[1_000] == costs[10_000]
    rows_read, rows_written, alarm_writes, statements = costs[10]
    assert rows_written == 0  # nothing but the alarm decision
    assert alarm_writes <= 1
    print(f"caught-up pass: rows_read={rows_read} rows_written={rows_written} "
          f"alarm_writes={alarm_writes} statements={statements}")


@pytest.mark.parametrize("settled", [10])
def test_caught_up_pass_reads_no_ledger(settled: int, clock: ManualClock) -> None:
    storage = SqliteStorage(":memory:", count_vm_steps=True)

    async def body() -> None:
        obj = Obj(storage, clock, echo_app)
        await obj.start()
        for n in range(settled):
            obj.admit(f"t{n}", {"n": n})
        await obj.run()
        seen: list[str] = []
        original = storage.exec

        def spy(sql: str, *params: object) -> object:
            seen.append(sql)
            return original(sql, *params)  # type: ignore[arg-type]

        storage.exec = spy  # type: ignore[assignment,method-assign]
        obj.space.scheduler.gate.schedule("probe.lane", clock.now_ms())
        obj.space.lanes.register("probe.lane", _idle, dispatch_timeout_ms=1_000)
        clock.advance(1_000)
        seen.clear()
        report = await obj.fire()
        assert report.phase is PassPhase.CAUGHT_UP
        assert not [sql for sql in seen if "tl_submissions" in sql or "tl_history" in sql]

    try:
        run(body())
    finally:
        storage.close()


async def _idle(now: int, deadline: int) -> int | None:
    return None
