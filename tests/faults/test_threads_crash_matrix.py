"""Crash matrix: lose the object at every runtime failpoint, rebuild, recover, finish.

Invariants: no admitted submission is lost; each settles exactly once; a step's function runs
again only if it had not finished, and an uncertain step in flight becomes an Unknown Outcome
instead of running again; the emitted record is in the history once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import Evicted
from threadline.scheduling import NATIVE, RUNTIME_LOCATIONS
from threadline.storage import SqliteStorage
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.records import SUBMISSION_SETTLED
from threadline.threads.turn import Turn

STEPS = ("a", "b", "c")
UNCERTAIN = {"b"}
#: How often each runtime failpoint is reached by one run of the agent below.
PASSES = {
    "attempt:claimed": 1,
    "step:started": 3,
    "step:finished": 3,
    "emit:committed": 1,
    # This agent takes no follow-up input (tests/faults/test_followups_crash_matrix.py does).
    "followups:joined": 0,
    "settle:before": 1,
    "settle:after": 1,
}
CASES = [(location, n) for location in RUNTIME_LOCATIONS for n in range(PASSES[location])]


def build(effects: Effects) -> Application:
    app = Application(RuntimeConfig())

    @app.agent("flow")
    async def flow(turn: Turn) -> Any:
        a = await turn.step("a", lambda: effects.hit("a"))
        await turn.emit({"text": "progress"})
        b = await turn.step("b", lambda: effects.hit("b"), effect="uncertain")
        c = await turn.step("c", lambda: effects.hit("c"))
        return [a, b, c]

    return app


def test_the_matrix_covers_every_runtime_failpoint() -> None:
    assert set(PASSES) == set(RUNTIME_LOCATIONS)


def test_the_agent_passes_each_failpoint_as_often_as_declared(
    storage: SqliteStorage, clock: ManualClock, effects: Effects,
) -> None:
    h = ThreadHarness(storage, clock, lambda: build(effects))
    h.admit("t", 1, agent="flow")
    h.admit("t", 2, agent="flow")
    asyncio.run(h.runtime.process_thread_head("t"))
    assert {location: h.failpoints.hits(location) for location in PASSES} == PASSES


@pytest.mark.parametrize(("location", "after"), CASES)
def test_crash_evict_recover(
    storage: SqliteStorage, clock: ManualClock, effects: Effects, settlements: SettlementLog,
    location: str, after: int,
) -> None:
    h = ThreadHarness(storage, clock, lambda: build(effects))
    first = h.admit("t", 1, agent="flow")
    second = h.admit("t", 2, agent="flow")
    h.failpoints.evict_at(location, after=after)
    with pytest.raises(Evicted):
        asyncio.run(h.runtime.process_thread_head("t"))

    at_crash = dict(effects.calls)
    journal = {
        row["step_key"].removeprefix("step:"): row["state"]
        for row in storage.exec("SELECT step_key, state FROM tl_journal WHERE submission_id = ?",
                                first.id)
    }
    crashed = h.get(first.id)
    if crashed.state is SubmissionState.RUNNING:
        # The lease deadline stands on the native lane: the alarm will come back for it.
        native = h.scheduler.due_queue.get(NATIVE)
        assert native is not None and native.due_at is not None
        assert native.due_at <= crashed.lease_expires_at
        assert storage.known_alarm() is not None

    h.evict()
    clock.advance(h.app.config.lease_ms)
    asyncio.run(h.drive())
    unknown = h.get(first.id).state is SubmissionState.UNKNOWN
    assert unknown == (journal.get("b") == "started")
    if unknown:
        h.ledger.resolve_unknown(first.id, "accept", "operator says sent")
        asyncio.run(h.drive())

    for sub in (first, second):
        done = h.get(sub.id)
        assert done.state is SubmissionState.SETTLED and done.outcome is Outcome.COMPLETED
        assert settlements.count(sub.id) == 1 and h.settled_records(sub.id) == 1
    # Each step of the crashed submission: run again only if it had not finished, and never
    # when it was uncertain and in flight.
    for step in STEPS:
        before = at_crash.get(step, 0)
        finished = journal.get(step) == "finished"
        in_flight_uncertain = step in UNCERTAIN and journal.get(step) == "started"
        again = 0 if finished or in_flight_uncertain else 1
        # The second submission runs each step once more.
        assert effects.count(step) == before + again + 1, (step, journal, at_crash)
    history = storage.exec("SELECT submission_id, kind FROM tl_history ORDER BY seq").rows
    # Each submission's record once, its settlement once and after it (an Unknown Outcome
    # lets the second run first, so the two submissions may interleave).
    for sub in (first, second):
        kinds = [row["kind"] for row in history if row["submission_id"] == sub.id]
        assert kinds == ["record", SUBMISSION_SETTLED], sub
    # Each record id once: the log leaves that to the facts it reports.
    logged = [row["record_id"] for row in storage.exec("SELECT record_id FROM tl_history")]
    assert sorted(logged) == sorted(set(logged)) and len(logged) == 4
