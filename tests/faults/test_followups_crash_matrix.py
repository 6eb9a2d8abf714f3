"""Crash matrix of follow-up input: lose the object at every occurrence of every runtime
failpoint while a head takes follow-up input (once before a step, once after an uncertain one
during which more input arrives), rebuild, recover, finish.

Invariants: every submission settles exactly once, with one settled record; the joined ones
settle with the head's outcome and were each joined once; every run of the agent that got a
list from a ``followups()`` call got the same list (the replay sees what the first run
journaled), and nothing that arrived is lost: what was not joined runs on its own after the
head, FIFO.
"""

from __future__ import annotations

import asyncio
from typing import Any

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import Evicted
from threadline.scheduling import RUNTIME_LOCATIONS
from threadline.storage import SqliteStorage, migrate
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads import waits
from threadline.threads.model import Outcome, SubmissionState, WaitKind
from threadline.threads.records import SUBMISSION_SETTLED
from threadline.threads.turn import Turn

_ORDER = "SELECT id, input_json FROM tl_submissions ORDER BY seq"


class Rig:
    """The harness over a fresh object, and every list each run of the agent was given."""

    def __init__(self, effects: Effects) -> None:
        self.effects = effects
        self.seen: dict[int, list[list[str]]] = {1: [], 2: []}
        storage = SqliteStorage(":memory:")
        migrate(storage)
        self.h = ThreadHarness(storage, ManualClock(1_700_000_000_000), self.build)

    def build(self) -> Application:
        app = Application(RuntimeConfig())

        def meanwhile() -> str:
            # Input arriving while the head works: keyed, so a step run again admits it once.
            self.effects.hit("b")
            self.h.admit("t", "late", agent="chat", key="late")
            self.h.admit("t", "ping", agent="other", key="ping")
            return "b"

        @app.agent("chat", join_followups=True)
        async def chat(turn: Turn) -> Any:
            await turn.step("a", lambda: self.effects.hit("a"))
            first = await turn.followups()
            self.seen[1].append([item.input for item in first])
            await turn.emit({"taken": [item.input for item in first]})
            await turn.step("b", meanwhile, effect="uncertain")
            second = await turn.followups()
            self.seen[2].append([item.input for item in second])
            return {"input": turn.input, "joined": [item.input for item in first + second]}

        @app.agent("other")
        async def other(turn: Turn) -> Any:
            return {"other": turn.input}

        return app

    def start(self) -> dict[str, str]:
        """Admit the head and the input queued behind it before it runs."""
        return {value: self.h.admit("t", value, agent="chat").id
                for value in ("hi", "one", "two")}

    def finish(self) -> int:
        """Drive to the end as passes and an operator would; rebuild after each crash."""
        crashes = 0
        for _ in range(40):
            try:
                asyncio.run(self.h.drive())
            except Evicted:
                crashes += 1
                self.h.failpoints.clear()
                self.h.evict()
                continue
            open_work = self.h.ledger.thread_open("t")
            if not open_work:
                return crashes
            for item in open_work:
                if item.state is SubmissionState.RUNNING:
                    self.h.clock.advance(self.h.app.config.lease_ms)
                elif item.state is SubmissionState.UNKNOWN:
                    self.h.ledger.resolve_unknown(item.submission_id, "retry")
                elif item.state is SubmissionState.READY and item.not_before is not None:
                    self.h.clock.set(max(self.h.clock.now_ms(), item.not_before))
                elif item.state is SubmissionState.SUSPENDED:
                    for wait in waits.open_waits(self.h.storage, item.submission_id):
                        assert wait.kind is WaitKind.TIMER
        raise AssertionError("the Thread did not finish")


def check(rig: Rig, ids: dict[str, str], settlements: SettlementLog, case: object) -> None:
    h = rig.h
    rows = h.storage.exec(_ORDER).rows
    by_input = {row["input_json"].strip('"'): row["id"] for row in rows}
    assert set(by_input) == {"hi", "one", "two", "late", "ping"}, case
    head = h.get(ids["hi"])
    result = {"input": "hi", "joined": ["one", "two", "late"]}
    assert (head.outcome, head.result) == (Outcome.COMPLETED, result), (case, head)
    for value in ("one", "two", "late"):
        joined = h.get(by_input[value])
        assert (joined.outcome, joined.result, joined.joined_to) == (
            Outcome.COMPLETED, result, head.id), (case, value, joined)
    ping = h.get(by_input["ping"])
    assert (ping.outcome, ping.result, ping.joined_to) == (
        Outcome.COMPLETED, {"other": "ping"}, None), case
    for sub_id in by_input.values():
        assert settlements.count(sub_id) == h.settled_records(sub_id) == 1, (case, sub_id)
    # Every run that got a list from a call got the same one: the first run's, journaled.
    assert set(map(tuple, rig.seen[1])) == {("one", "two")}, (case, rig.seen)
    assert set(map(tuple, rig.seen[2])) == {("late",)}, (case, rig.seen)
    # The emitted record is in the history once, whatever ran again, beside one settlement
    # record per submission.
    kinds = [str(row["kind"]) for row in h.storage.exec("SELECT kind FROM tl_history")]
    assert len(kinds) == 1 + len(by_input), (case, kinds)
    assert kinds.count(SUBMISSION_SETTLED) == len(by_input), (case, kinds)


def test_every_crash_while_taking_followups_keeps_them_exactly_once(
    settlements: SettlementLog,
) -> None:
    clean = Rig(Effects())
    ids = clean.start()
    assert clean.finish() == 0
    check(clean, ids, settlements, "clean")
    passes = {location: clean.h.failpoints.hits(location) for location in RUNTIME_LOCATIONS}
    assert all(passes.values()), passes
    assert passes["followups:joined"] == 2

    cases = 0
    for location in RUNTIME_LOCATIONS:
        for after in range(passes[location]):
            settlements.counts.clear()  # ids repeat across the fresh objects of each case
            rig = Rig(Effects())
            ids = rig.start()
            rig.h.failpoints.evict_at(location, after=after)
            assert rig.finish() == 1, (location, after)
            check(rig, ids, settlements, (location, after))
            # A finished step is never run again; "b" runs again only after an operator's
            # retry of it (it was uncertain and in flight), still admitting its input once.
            assert rig.effects.count("a") <= 2 and rig.effects.count("b") <= 2
            cases += 1
    assert cases == sum(passes.values())
