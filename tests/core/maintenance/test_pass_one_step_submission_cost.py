"""What one one-step submission costs end to end (admission plus the passes that settle it),
and that it does not grow with settled history. Prints the SqliteStorage meter figures."""

from __future__ import annotations

from typing import Any

from pass_support import CONFIG, Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.storage import SqliteStorage


def _one_step_app() -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        async def step() -> str:
            return "done"

        return await turn.step("only", step)

    return app


def _cost(history: int, clock: ManualClock) -> tuple[int, int, int, int, int, int]:
    storage = SqliteStorage(":memory:")

    async def body() -> tuple[int, int, int, int, int, int]:
        obj = Obj(storage, clock, _one_step_app)
        await obj.start()
        await obj.run()
        for n in range(history):
            obj.admit(f"h{n % 7}", {"n": n})
        await obj.run()
        before = obj.cost()
        obj.admit("t", {"n": "x"})
        admitted = obj.cost() - before
        reports = await obj.run()
        total = obj.cost() - before
        return (admitted.rows_read, admitted.rows_written, total.rows_read, total.rows_written,
                total.alarm_writes, len(reports))

    try:
        return run(body())  # type: ignore[no-any-return]
    finally:
        storage.close()


def test_one_step_submission_costs_one_pass_and_the_same_rows_whatever_the_history(
    clock: ManualClock,
) -> None:
    small, large = _cost(3, clock), _cost(300, clock)
    assert small == large
    admit_read, admit_written, read, written, alarms, passes = small
    assert passes == 1
    print(f"one-step submission: admission rows_read={admit_read} rows_written={admit_written};"
          f" end to end rows_read={read} rows_written={written} alarm_writes={alarms}"
          f" passes={passes}")


def _pass_reads(threads: int, clock: ManualClock) -> int:
    storage = SqliteStorage(":memory:")

    async def body() -> int:
        obj = Obj(storage, clock, _one_step_app)
        await obj.start()
        await obj.run()
        for n in range(threads):
            obj.admit(f"t{n:03d}", {"n": n})
        reports = await obj.run()
        assert len(reports) == 1 and reports[0].settled == threads
        return reports[0].rows_read

    try:
        return run(body())  # type: ignore[no-any-return]
    finally:
        storage.close()


def test_pass_reads_open_work_once_not_once_per_attempt(clock: ManualClock) -> None:
    # Between Attempts only the Thread whose Attempt ended is read again: the rows a pass
    # reads grow with the work it does, not with its square.
    small, large = _pass_reads(20, clock), _pass_reads(80, clock)
    assert large <= 4 * small + 40
