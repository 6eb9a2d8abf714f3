"""Ends of an Attempt that earlier tests never reached.

* An abort accepted while the agent's LAST step runs has no later step boundary to be seen
  at; the agent then returns normally. Settlement itself is the boundary: it settles aborted.
* An uncertain step lost in flight on the LAST allowed attempt is still an Unknown Outcome:
  the spent attempt budget must not turn "may have acted" into a plain failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from threadline.app import Application
from threadline.config import RuntimeConfig
from threadline.errors import Evicted
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads.model import AbortState, Outcome, SubmissionState
from threadline.threads.recovery import Disposition, RecoveryDecision
from threadline.threads.turn import Turn

MakeHarness = Callable[..., ThreadHarness]


def test_an_abort_accepted_during_the_last_step_wins_over_a_normal_return(
    make_harness: MakeHarness, settlements: SettlementLog, effects: Effects
) -> None:
    holder: dict[str, ThreadHarness] = {}

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("quick")
        async def quick(turn: Turn) -> Any:
            await turn.step("first", lambda: effects.hit("first"))

            def last() -> int:
                holder["h"].ledger.request_abort(turn.submission_id, "stop now")
                return effects.hit("last")

            value = await turn.step("last", last)
            effects.hit("returned")
            return value

        return app

    h = make_harness(build)
    holder["h"] = h
    sub = h.admit("a", None, agent="quick")
    settlement = asyncio.run(h.runtime.process_thread_head("a"))
    # The agent did return normally after the abort was accepted...
    assert effects.calls == {"first": 1, "last": 1, "returned": 1}
    # ...and the settlement is still the abort's, with no result.
    assert settlement is not None and settlement.outcome is Outcome.ABORTED
    assert settlement.result is None
    done = h.get(sub.id)
    assert (done.state, done.outcome, done.result) == (
        SubmissionState.SETTLED, Outcome.ABORTED, None)
    intent = h.ledger.read_abort_intent(sub.id)
    assert intent is not None and intent.state is AbortState.APPLIED
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1


def test_an_uncertain_step_lost_on_the_last_allowed_attempt_is_unknown(
    make_harness: MakeHarness, settlements: SettlementLog, effects: Effects
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("pay")
        async def pay(turn: Turn) -> Any:
            if turn.attempt == 1:
                raise RuntimeError("transient, before the payment")
            return await turn.step("charge", lambda: effects.hit("charge"),
                                   effect="uncertain")

        return app

    h = make_harness(build, RuntimeConfig(max_attempts=2))
    sub = h.admit("a", None, agent="pay")
    assert asyncio.run(h.runtime.process_thread_head("a")) is None
    retrying = h.get(sub.id)
    assert (retrying.state, retrying.attempts) == (SubmissionState.READY, 1)
    h.clock.set(retrying.not_before)

    # Attempt 2 of 2 starts the uncertain step and the object is lost while it runs.
    h.failpoints.evict_at("step:started")
    with pytest.raises(Evicted):
        asyncio.run(h.runtime.process_thread_head("a"))
    lost = h.get(sub.id)
    assert (lost.state, lost.attempts) == (SubmissionState.RUNNING, 2)
    h.evict()
    h.clock.advance(h.app.config.lease_ms)
    recovered, _ = asyncio.run(h.step("a"))
    assert [(r.decision, r.disposition, r.step_key) for r in recovered.reports] == [
        (RecoveryDecision.UNKNOWN_OUTCOME, Disposition.UNKNOWN, "step:charge")]
    assert h.get(sub.id).state is SubmissionState.UNKNOWN
    assert settlements.count(sub.id) == 0

    # The operator knows the charge went through: the submission completes with it.
    h.ledger.resolve_unknown(sub.id, "accept", "charged")
    asyncio.run(h.drive())
    done = h.get(sub.id)
    assert (done.outcome, done.result) == (Outcome.COMPLETED, "charged")
    assert effects.count("charge") == 0
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1
