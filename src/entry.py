"""The example Worker: one application, its Durable Object class and its entrypoint.

A user's own Worker looks like this: build an ``Application``, register agents, then declare
the two classes that ``wrangler.toml`` names. The two agents here exist so that the API works on
a fresh clone; replace them with your own.
"""

from typing import Any

import threadline
from threadline.worker import ThreadObjectBase, WorkerBase

app = threadline.Application()


def _text(value: Any) -> str:
    """The ``text`` of an input shaped ``{"text": str}``; anything else cannot succeed."""
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    raise threadline.NonRetryable('input must be {"text": <string>}')


@app.agent("echo")
async def echo(turn: threadline.Turn) -> dict[str, Any]:
    """Say the input's text back: one journaled step, one history record."""
    text = _text(turn.input)
    said = await turn.step("echo", lambda: text)
    await turn.emit({"role": "assistant", "text": said})
    return {"text": said}


@app.agent("confirm")
async def confirm(turn: threadline.Turn) -> dict[str, Any]:
    """Ask for an approval of the input's text; say it only once approved."""
    text = _text(turn.input)
    if not await turn.approval("confirm", {"text": text}):
        return {"approved": False}
    await turn.emit({"role": "assistant", "text": text})
    return {"approved": True}


class ThreadObject(ThreadObjectBase):
    """Hosts the Threads of one space (the Durable Object class in wrangler.toml)."""

    app = app


class Default(WorkerBase):
    """The Worker's HTTP entrypoint."""

    app = app
