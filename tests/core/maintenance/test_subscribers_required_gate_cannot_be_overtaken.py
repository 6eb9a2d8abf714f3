"""The required gate cannot be overtaken: a record committed by any producer while a pass runs
another Thread's Attempt (here an abort of Thread a's suspended head, requested while Thread
b's Attempt runs) is consumed by every required subscriber before a's next native work starts."""

from __future__ import annotations

import asyncio
from typing import Any

from subscribers_support import CONFIG, clock

from threadline import Application, Record, Turn
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState
from threadline.threads.records import SUBMISSION_SETTLED


async def _abort_during_a_pass() -> None:
    events: list[tuple[str, Any]] = []
    app = Application(CONFIG)
    running, aborted = asyncio.Event(), asyncio.Event()

    @app.agent("asker")
    async def asker(turn: Turn) -> None:
        events.append(("ran", turn.input["name"]))
        if turn.input.get("ask"):
            await turn.approval("go")

    @app.agent("aborter")
    async def aborter(turn: Turn) -> None:
        # While it runs, a request served meanwhile aborts a's suspended head.
        events.append(("ran", turn.input["name"]))
        running.set()
        await aborted.wait()

    @app.subscriber("audit", required=True)
    async def audit(batch: list[Record]) -> None:
        events.extend(("audited", (record.thread_id, record.kind, record.submission_id))
                      for record in batch)

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        head = obj.admit("a", "asker", {"name": "a1", "ask": True}).id
        await obj.run_alarms()
        assert obj.submission(head).state is SubmissionState.SUSPENDED
        follower = obj.admit("a", "asker", {"name": "a2"}).id
        obj.admit("b", "aborter", {"name": "b1"})

        async def request() -> None:
            await running.wait()
            obj.abort(head, "no longer wanted")
            aborted.set()

        producer = asyncio.ensure_future(request())
        await obj.run_alarms()
        await producer
        assert obj.submission(follower).state is SubmissionState.SETTLED
        consumed = events.index(("audited", ("a", SUBMISSION_SETTLED, head)))
        assert consumed < events.index(("ran", "a2")), events


def test_a_record_committed_during_a_pass_is_consumed_before_its_threads_next_work() -> None:
    asyncio.run(_abort_during_a_pass())
