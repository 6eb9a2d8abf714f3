"""A tool marked ``{"threadline": {"effect": "uncertain"}}`` runs as an uncertain step: an
Attempt lost while it runs leaves an Unknown Outcome for an operator, never a second call.

An operator who accepts a value gives what the tool would have returned, and the model reads
exactly that; one who retries has the tool called again, once.
"""

from __future__ import annotations

import asyncio

import pytest
from pai_support import Script, order_tools, support_agent, support_app
from pydantic_ai import FunctionToolset

from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.storage import SqliteStorage
from threadline.testing import Effects, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState

UNCERTAIN = {"effect": "uncertain"}


def _lose_once(effects: Effects) -> None:
    """Lose the object inside the first refund, right after its effect."""
    if effects.count("refund_order") == 1:
        raise Evicted("inside refund_order")


def _losing_inside_the_refund(effects: Effects) -> FunctionToolset[object]:
    return order_tools(effects, refund=UNCERTAIN, after_refund=lambda: _lose_once(effects))


def _lost(storage: SqliteStorage, clock: ManualClock,
          effects: Effects) -> tuple[ThreadHarness, str]:
    script = Script(effects)
    h = ThreadHarness(storage, clock, lambda: support_app(
        lambda: support_agent(script, _losing_inside_the_refund(effects))))
    sub = h.admit("t", {"text": "order A1"}, agent="support")
    with pytest.raises(Evicted):
        asyncio.run(h.drive())
    h.evict()
    clock.advance(h.app.config.lease_ms)
    asyncio.run(h.drive())
    return h, sub.id


def test_an_attempt_lost_inside_an_uncertain_tool_is_an_unknown_outcome(
    storage: SqliteStorage, clock: ManualClock,
) -> None:
    effects = Effects()
    h, sub = _lost(storage, clock, effects)
    unknown = h.get(sub)
    assert unknown.state is SubmissionState.UNKNOWN
    step = "step:support__function_toolset__orders.call_tool:refund_order"
    row = storage.exec("SELECT state, effect FROM tl_journal WHERE submission_id = ? AND "
                       "step_key = ?", sub, step).one()
    assert (row["state"], row["effect"]) == ("started", "uncertain")
    assert effects.count("refund_order") == 1
    asyncio.run(h.drive())
    assert effects.count("refund_order") == 1  # waits for an operator, never calls again


def test_an_accepted_value_is_what_the_model_reads_as_the_tools_return(
    storage: SqliteStorage, clock: ManualClock,
) -> None:
    effects = Effects()
    h, sub = _lost(storage, clock, effects)
    h.ledger.resolve_unknown(sub, "accept", "A1 refunded by hand", subject="ops")
    asyncio.run(h.drive())
    done = h.get(sub)
    assert done.outcome is Outcome.COMPLETED
    assert done.result == {"text": "Order A1 shipped and A1 refunded by hand."}
    assert effects.count("refund_order") == 1
    assert [effects.count(f"model:{n}") for n in (1, 2, 3)] == [1, 1, 1]


def test_a_retried_unknown_outcome_calls_the_tool_once_more(
    storage: SqliteStorage, clock: ManualClock,
) -> None:
    effects = Effects()
    h, sub = _lost(storage, clock, effects)
    h.ledger.resolve_unknown(sub, "retry", subject="ops")
    asyncio.run(h.drive())
    done = h.get(sub)
    assert done.result == {"text": "Order A1 shipped and A1 refunded."}
    assert effects.count("refund_order") == 2
    assert effects.count("lookup_order") == 1


def test_an_idempotent_tool_lost_inside_runs_again(
    storage: SqliteStorage, clock: ManualClock,
) -> None:
    effects = Effects()
    script = Script(effects)
    tools = order_tools(effects, after_refund=lambda: _lose_once(effects))
    h = ThreadHarness(storage, clock, lambda: support_app(lambda: support_agent(script, tools)))
    sub = h.admit("t", {"text": "order A1"}, agent="support")
    with pytest.raises(Evicted):
        asyncio.run(h.drive())
    h.evict()
    clock.advance(h.app.config.lease_ms)
    asyncio.run(h.drive())
    assert h.get(sub.id).outcome is Outcome.COMPLETED
    assert effects.count("refund_order") == 2
