"""Admissions that arrive through the API while a long pass runs cost that pass only what they
add: the pass reads the Thread each one names, not all open work again per admission.

The figures are the SqliteStorage meter's (rows returned plus rows changed, an approximation of
workerd's billed rows read), for the pass that finds 200 Threads waiting for a slot and takes 60
admissions of new Threads during it. Run with ``-s`` to see them.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Callable
from typing import Any

from threadline import Application
from threadline.api.http import Request
from threadline.maintenance import PassPhase
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome

WAITING = 200
ARRIVING = 60


def _app(arrivals: list[Callable[[], None]]) -> Application:
    app = Application()  # native_concurrency 2: the 200 Threads wait for a slot

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        # Every other Attempt of the waiting Threads lets one request in, from outside the
        # pass (a fresh context, as the platform delivers it): one admission per wake.
        if arrivals and turn.thread_id.startswith("wait-") and int(turn.thread_id[5:]) % 2 == 0:
            asyncio.get_running_loop().call_soon(arrivals.pop(), context=contextvars.Context())
        return {"echo": turn.input}

    return app


def _post(thread: str) -> Request:
    body = json.dumps({"agent": "echo", "input": {"thread": thread}}).encode()
    return Request.from_url("POST", f"http://object/v1/spaces/s/threads/{thread}/submissions",
                            {"content-type": "application/json"}, body)


async def _pass_rows_read(waiting: int, arriving: int) -> tuple[int, int]:
    """Rows read by the pass that finds ``waiting`` Threads, with ``arriving`` admissions
    during it, and rows read by those admissions themselves (measured alone, afterwards)."""
    arrivals: list[Callable[[], None]] = []
    responses: list[asyncio.Future[Any]] = []
    async with SimulatedObject(_app(arrivals)) as obj:

        def admit_waiting() -> None:
            for i in range(waiting):
                obj.admit(f"wait-{i:03d}", "echo", {"n": i})

        obj.storage.transaction(admit_waiting)
        for n in reversed(range(arriving)):
            arrivals.append(lambda n=n: responses.append(
                asyncio.ensure_future(obj.space.handle(_post(f"late-{n:02d}")))))
        reports = await obj.run_alarms(max_passes=10)
        assert not arrivals and [r.result().status for r in responses] == [202] * arriving
        first = reports[0]
        assert first.phase is PassPhase.ACTIONABLE
        # Everything, the late input included, ran in that one pass.
        assert first.settled == waiting + arriving
        assert all(s.outcome is Outcome.COMPLETED for s in obj.submissions())
        # Input that overlapped it keeps its generation unacknowledged: one more pass, with
        # nothing left to run, acknowledges it.
        assert [r.dispatched for r in reports[1:]] == ([0] if arriving else [])
        assert obj.alarm_at is None
        # What the same admissions read by themselves, outside any pass.
        before = obj.storage.meter.reading()
        for n in range(arriving):
            assert (await obj.space.handle(_post(f"alone-{n:02d}"))).status == 202
        admissions = (obj.storage.meter.reading() - before).rows_read
        return first.rows_read, admissions


def test_admissions_during_a_long_pass_cost_only_what_they_add() -> None:
    alone, _ = asyncio.run(_pass_rows_read(WAITING, 0))
    during, admissions = asyncio.run(_pass_rows_read(WAITING, ARRIVING))
    # The same 260 Threads, all waiting when the pass begins.
    upfront, _ = asyncio.run(_pass_rows_read(WAITING + ARRIVING, 0))
    print(f"\nrows read (SqliteStorage meter) by the pass over {WAITING} waiting Threads:"
          f" {alone} alone, {during} with {ARRIVING} admissions during it"
          f" ({admissions} of them read by the admissions themselves);"
          f" {upfront} for the {WAITING + ARRIVING} Threads waiting at its begin")
    # Input that arrives during the pass costs it what the same input costs when it is
    # already there at the begin, plus the admissions' own reads: not a rescan of all open
    # work per admission (which read 22,357 rows here, 15 times as much).
    assert during <= upfront + admissions


def test_a_decision_and_an_abort_during_a_pass_are_read_by_that_pass() -> None:
    # The Threads they name are read again, though neither was live when the pass began:
    # the approved head runs in the same pass, and the abort frees its follower there too.
    app = Application()
    arrivals: list[Callable[[], None]] = []

    @app.agent("ask")
    async def ask(turn: Any) -> Any:
        return (await turn.approval("go")).approved

    @app.agent("slow")
    async def slow(turn: Any) -> Any:
        while arrivals:
            asyncio.get_running_loop().call_soon(arrivals.pop(), context=contextvars.Context())
            await asyncio.sleep(0)
        return "slow"

    async def body() -> None:
        async with SimulatedObject(app) as obj:
            approved = obj.admit("approved", "ask", {})
            aborted = obj.admit("aborted", "ask", {})
            await obj.run_alarms()
            follower = obj.admit("aborted", "slow", {})
            obj.admit("busy", "slow", {})
            arrivals.extend([lambda: obj.approve(approved.id, "go"),
                             lambda: obj.abort(aborted.id)])
            reports = await obj.run_alarms()
            assert obj.submission(approved.id).result is True
            assert obj.submission(aborted.id).outcome is Outcome.ABORTED
            assert obj.submission(follower.id).outcome is Outcome.COMPLETED
            assert reports[0].settled == 3

    asyncio.run(body())


def test_input_after_an_advance_that_names_no_thread_is_read_by_that_pass() -> None:
    # A producer that cannot tell which Threads it changed names none: the running pass then
    # reads all open work again, and the input admitted after it runs in that same pass.
    app = Application()
    arrivals: list[Callable[[], None]] = []

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        return {"echo": turn.input}

    @app.agent("slow")
    async def slow(turn: Any) -> Any:
        while arrivals:
            asyncio.get_running_loop().call_soon(arrivals.pop(), context=contextvars.Context())
            await asyncio.sleep(0)
        return "slow"

    async def body() -> None:
        async with SimulatedObject(app) as obj:
            busy = obj.admit("busy", "slow", {})
            late: list[Any] = []
            arrivals.extend([lambda: late.append(obj.admit("late", "echo", {})),
                             lambda: obj.runtime.gate.mutate(lambda: None)])
            reports = await obj.run_alarms()
            assert obj.submission(busy.id).outcome is Outcome.COMPLETED
            assert obj.submission(late[0].id).outcome is Outcome.COMPLETED
            assert reports[0].settled == 2

    asyncio.run(body())
