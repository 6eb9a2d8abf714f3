"""Zombie Attempts: an Attempt whose lease was lost while it still ran must change nothing.

The first Attempt (A) parks in the agent body, outside any step. The object is replaced while A
still runs (A is now a zombie of the old incarnation): the new incarnation finds A's claim
stamped by another incarnation, recovery readies the submission again at once, and a second
Attempt (B) claims it and parks too. (Within one incarnation recovery never touches a Thread
whose Attempt is running, so a zombie needs an incarnation that outlived its object.) Then A resumes
and tries to end: settle, fail for a retry, or suspend. Every such end is a compare-and-set on
A's claimed revision; the submission is ``running`` again (under B), so only the revision tells
A's claim from B's. A must end with nothing written, and B must own the submission to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from threadline.app import Application
from threadline.config import RuntimeConfig
from threadline.testing import SettlementLog, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.recovery import RecoveryDecision
from threadline.threads.turn import Turn

MakeHarness = Callable[..., ThreadHarness]
#: How many loop turns a parked Attempt gets to reach its parking point (none sleeps).
SPIN = 50


class Parking:
    """One gate per Attempt number: the agent parks at it until the test opens it."""

    def __init__(self) -> None:
        self.parked: dict[int, asyncio.Event] = {}
        self.go: dict[int, asyncio.Event] = {}

    def gate(self, attempt: int) -> tuple[asyncio.Event, asyncio.Event]:
        if attempt not in self.go:
            self.parked[attempt] = asyncio.Event()
            self.go[attempt] = asyncio.Event()
        return self.parked[attempt], self.go[attempt]

    async def park(self, attempt: int) -> None:
        parked, go = self.gate(attempt)
        parked.set()
        await go.wait()

    async def until_parked(self, attempt: int) -> None:
        parked, _ = self.gate(attempt)
        await asyncio.wait_for(parked.wait(), 1)


def zombie_app(parking: Parking, a_ends: str) -> Callable[[RuntimeConfig], Application]:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("slow")
        async def slow(turn: Turn) -> Any:
            await turn.step("prepare", lambda: turn.attempt)
            await parking.park(turn.attempt)
            if turn.attempt == 1:
                if a_ends == "fail":
                    raise RuntimeError("the zombie failed")
                if a_ends == "suspend":
                    await turn.approval("zombie")
                return "from the zombie"
            return "from the live Attempt"

        return app

    return build


def _control(h: ThreadHarness, sub_id: str) -> dict[str, Any]:
    return h.storage.exec(
        "SELECT state, revision, attempts, lease_owner FROM tl_submissions WHERE id = ?", sub_id
    ).one()


async def _zombie_then_live(
    h: ThreadHarness, settlements: SettlementLog, parking: Parking, sub_id: str
) -> None:
    zombie = asyncio.create_task(h.runtime.process_thread_head("t"))
    await parking.until_parked(1)
    claimed_by_zombie = _control(h, sub_id)
    # A new incarnation takes over while A still runs; its lease has not expired, but A's
    # claim names the old incarnation, so recovery readies the submission again at once.
    h.evict()
    assert [r.decision for r in h.runtime.run_recovery("t").reports] == [
        RecoveryDecision.RE_READY]
    live = asyncio.create_task(h.runtime.process_thread_head("t"))
    await parking.until_parked(2)
    claimed_by_live = _control(h, sub_id)
    assert claimed_by_live["state"] == "running"
    assert claimed_by_live["lease_owner"] != claimed_by_zombie["lease_owner"]

    # The zombie wakes and tries to end its Attempt: nothing of it may land.
    parking.gate(1)[1].set()
    ended = await asyncio.wait_for(zombie, 1)
    assert settlements.count(sub_id) == 0, "the zombie settled the live Attempt's claim"
    assert ended is None
    assert _control(h, sub_id) == claimed_by_live
    open_waits = h.storage.exec(
        "SELECT COUNT(*) FROM tl_waits WHERE submission_id = ?", sub_id).scalar()
    assert open_waits == 0

    # The live Attempt still owns the submission and settles it.
    parking.gate(2)[1].set()
    settlement = await asyncio.wait_for(live, 1)
    assert settlement is not None and settlement.outcome is Outcome.COMPLETED
    assert settlement.result == "from the live Attempt"


@pytest.mark.parametrize("a_ends", ["settle", "fail", "suspend"])
def test_a_zombie_attempt_cannot_end_the_live_attempts_claim(
    make_harness: MakeHarness, settlements: SettlementLog, a_ends: str
) -> None:
    parking = Parking()
    h = make_harness(zombie_app(parking, a_ends))
    sub = h.admit("t", None, agent="slow")
    asyncio.run(_zombie_then_live(h, settlements, parking, sub.id))
    done = h.get(sub.id)
    assert (done.state, done.outcome, done.result) == (
        SubmissionState.SETTLED, Outcome.COMPLETED, "from the live Attempt")
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1
    assert h.storage.exec("SELECT COUNT(*) FROM tl_history WHERE kind = 'approval.requested'"
                          ).scalar() == 0


def test_a_zombie_attempt_cannot_settle_what_recovery_settled(
    make_harness: MakeHarness, settlements: SettlementLog
) -> None:
    """Recovery settles the lost Attempt aborted; the zombie's later return changes nothing."""
    parking = Parking()
    h = make_harness(zombie_app(parking, "settle"))
    sub = h.admit("t", None, agent="slow")

    async def scenario() -> None:
        zombie = asyncio.create_task(h.runtime.process_thread_head("t"))
        await parking.until_parked(1)
        h.evict()
        h.ledger.request_abort(sub.id, "stop")
        assert [r.decision for r in h.runtime.run_recovery("t").reports] == [
            RecoveryDecision.SETTLE_ABORTED]
        settled = h.get(sub.id)
        parking.gate(1)[1].set()
        ended = await asyncio.wait_for(zombie, 1)
        # Counted at the transition: a second settlement would not get as far as its record.
        assert settlements.count(sub.id) == 1
        assert ended is None
        again = h.get(sub.id)
        assert (again.revision, again.outcome, again.settled_at) == (
            settled.revision, Outcome.ABORTED, settled.settled_at)

    asyncio.run(scenario())
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1
