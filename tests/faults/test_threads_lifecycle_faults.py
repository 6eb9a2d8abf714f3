"""Crash at every occurrence of every runtime failpoint across a whole lifecycle.

The agent backs off once, sleeps durably, waits for an approval, takes its follow-up input
(none: it is alone in its Thread) and emits; the test loses the
object at the n-th time a failpoint is reached (for every n), rebuilds it, and drives the
submission to its end, resolving waits as an operator would. Exactly one settlement results.
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
from threadline.threads.turn import Turn


def build(effects: Effects) -> Application:
    app = Application(RuntimeConfig())

    @app.agent("life", join_followups=True)
    async def life(turn: Turn) -> Any:
        first = await turn.step("first", lambda: effects.hit("first"))
        if turn.attempt == 1:
            raise RuntimeError("transient")
        await turn.sleep(5)
        decision = await turn.approval("go", {"first": first})
        assert await turn.followups() == []
        await turn.emit({"approved": bool(decision)})
        return await turn.step("last", lambda: effects.hit("last"))

    return app


def finish(h: ThreadHarness, submission_id: str) -> tuple[ThreadHarness, int]:
    """Drive to settlement like passes and an operator would; rebuild after a crash.

    Returns the harness of the last incarnation and how many crashes happened on the way.
    """
    crashes = 0
    for _ in range(40):
        try:
            asyncio.run(h.drive())
        except Evicted:
            crashes += 1
            h.failpoints.clear()
            h.evict()
            continue
        current = h.get(submission_id)
        if current.state is SubmissionState.SETTLED:
            return h, crashes
        if current.state is SubmissionState.RUNNING:
            h.clock.advance(h.app.config.lease_ms)
        elif current.state is SubmissionState.READY and current.not_before is not None:
            h.clock.set(max(h.clock.now_ms(), current.not_before))
        elif current.state is SubmissionState.UNKNOWN:
            h.ledger.resolve_unknown(submission_id, "retry")
        elif current.state is SubmissionState.SUSPENDED:
            for wait in waits.open_waits(h.storage, submission_id):
                if wait.kind is WaitKind.TIMER and wait.wake_at is not None:
                    h.clock.set(max(h.clock.now_ms(), wait.wake_at))
                elif wait.kind is WaitKind.APPROVAL:
                    h.ledger.decide_approval(submission_id, wait.key, approved=True)
    raise AssertionError(f"submission did not settle: {h.get(submission_id)}")


def fresh(clock: ManualClock, effects: Effects) -> ThreadHarness:
    storage = SqliteStorage(":memory:")
    migrate(storage)
    return ThreadHarness(storage, clock, lambda: build(effects))


def test_every_occurrence_of_every_failpoint(settlements: SettlementLog) -> None:
    # A clean run counts how often each failpoint is reached.
    effects = Effects()
    h = fresh(ManualClock(), effects)
    sub = h.admit("t", 0, agent="life")
    assert finish(h, sub.id)[1] == 0
    passes = {location: h.failpoints.hits(location) for location in RUNTIME_LOCATIONS}
    assert all(passes.values()), passes
    assert h.get(sub.id).outcome is Outcome.COMPLETED

    cases = 0
    for location in RUNTIME_LOCATIONS:
        for after in range(passes[location]):
            effects = Effects()
            settlements.counts.clear()  # ids repeat across the fresh objects of each case
            h = fresh(ManualClock(), effects)
            sub = h.admit("t", 0, agent="life")
            h.failpoints.evict_at(location, after=after)
            h, crashes = finish(h, sub.id)
            # The failpoint did fire: the case exercised a crash, not a clean run.
            assert crashes == 1, (location, after)
            done = h.get(sub.id)
            assert done.outcome is Outcome.COMPLETED, (location, after, done)
            assert settlements.count(sub.id) == h.settled_records(sub.id) == 1, (location, after)
            # The approval request and its decision, the emitted record and the settlement,
            # each once.
            kinds = [row["kind"] for row in h.storage.exec(
                "SELECT kind FROM tl_history ORDER BY seq")]
            assert kinds == ["approval.requested", "approval.decided", "record",
                             "submission.settled"], (
                location, after)
            # No failpoint lies between a step's call and its finished journal entry, so no
            # crash here loses a run: a finished step replays, each runs exactly once.
            assert (effects.count("first"), effects.count("last")) == (1, 1), (location, after)
            cases += 1
    assert cases == sum(passes.values())
