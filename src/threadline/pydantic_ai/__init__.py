"""threadline as a durable execution engine for Pydantic AI agents (``threadline[pydantic-ai]``).

Inside a threadline agent, :func:`run_durably` runs a Pydantic AI agent built with the
:class:`ThreadlineDurability` capability so that each model request and tool call is a
journaled ``turn.step``::

    support_agent = Agent(model, name="support", capabilities=[ThreadlineDurability()])

    @app.agent("support")
    async def support(turn: threadline.Turn) -> dict[str, Any]:
        result = await run_durably(turn, support_agent, turn.input["text"])
        return {"text": result.output}

A crash or eviction at any point resumes the run without repeating a finished model request or
tool call; a tool marked ``metadata={"threadline": {"effect": "uncertain"}}`` becomes an Unknown
Outcome if the Attempt is lost inside it; a tool that needs approval suspends on
``turn.approval``; the model's streamed text reaches the Thread's readers through ``turn.stream``
(one record per message); the conversation continues from the Thread's earlier runs. Model
clients reach the network through ``turn.http`` with :class:`TurnTransport` (and
:func:`openai_client` / :func:`openai_model`, which need the ``openai`` package and are imported
only when used).

``import threadline`` never imports this package, nor Pydantic AI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadline.pydantic_ai.durability import DECLINED, ThreadlineDurability, approval_key
from threadline.pydantic_ai.durable_run import (
    DEFAULT_HISTORY_RUNS,
    MESSAGES_KIND,
    earlier_messages,
    run_durably,
)
from threadline.pydantic_ai.step_backend import STEP_CONFIG_KEY, step_name
from threadline.pydantic_ai.turn_transport import TurnTransport

if TYPE_CHECKING:
    from threadline.pydantic_ai.openai_models import openai_client, openai_model

__all__ = [
    "DECLINED",
    "DEFAULT_HISTORY_RUNS",
    "MESSAGES_KIND",
    "STEP_CONFIG_KEY",
    "ThreadlineDurability",
    "TurnTransport",
    "approval_key",
    "earlier_messages",
    "openai_client",
    "openai_model",
    "run_durably",
    "step_name",
]


def __getattr__(name: str) -> Any:
    """Import the OpenAI helpers (and the ``openai`` package) only when they are used."""
    if name in ("openai_client", "openai_model"):
        from threadline.pydantic_ai import openai_models

        value = getattr(openai_models, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
