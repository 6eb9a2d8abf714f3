"""A pass reads a dispatched Thread's open work once for its recovery and its claim: both
decide from what the scan read, unless something changed the Thread since."""

from __future__ import annotations

import asyncio
from typing import Any

from pass_support import Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.maintenance.pass_state import SELECT_BEFORE
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome

_THREAD_OPEN = "SELECT id, thread_id, seq, agent, state, revision, attempts"


def _spy(storage: SqliteStorage, seen: list[tuple[str, ...]]) -> None:
    real = storage.exec

    def exec_(sql: str, *params: Any) -> Any:
        if sql.startswith(_THREAD_OPEN):
            seen.append(tuple(str(p) for p in params))
        return real(sql, *params)

    storage.exec = exec_  # type: ignore[method-assign]


def test_recovery_and_the_claim_decide_from_the_scan(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        sub = obj.admit("t", {"n": 1})
        seen: list[tuple[str, ...]] = []
        _spy(raw_storage, seen)
        clock.advance(1_000)
        report = await obj.fire()
        assert report.settled == 1
        assert obj.get(sub.id).outcome is Outcome.COMPLETED
        # The scan, then the checkpoint's read of the Thread the Attempt touched.
        assert seen == [("t", "t"), ("t", "t")]

    run(body())


def test_input_admitted_to_the_thread_before_its_dispatch_is_read_again(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        first = obj.admit("t", {"n": 1})
        seen: list[tuple[str, ...]] = []
        _spy(raw_storage, seen)
        clock.advance(1_000)
        select = obj.failpoints.block_at(SELECT_BEFORE)
        pending = asyncio.ensure_future(obj.fire())
        await asyncio.wait_for(select.arrived.wait(), 1)
        second = obj.admit("t", {"n": 2})
        select.release()
        await pending
        await obj.run()
        assert obj.get(first.id).outcome is Outcome.COMPLETED
        assert obj.get(second.id).outcome is Outcome.COMPLETED
        assert obj.get(first.id).settled_at <= obj.get(second.id).settled_at  # FIFO
        # The admission named the Thread: its recovery read it again rather than trust the
        # scan.
        assert len(seen) > 2

    run(body())
