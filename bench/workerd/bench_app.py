"""The agents every benchmark scenario runs, in CPython and in workerd alike."""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

from threadline.app import Application
from threadline.threads import Turn

#: The deployed defaults: the benchmark measures what a user gets.
app = Application()


@app.agent("unit")
async def unit(turn: Turn) -> Any:
    """The simple submission: one journaled step, one emitted record."""
    result = await turn.step("work", lambda: {"got": turn.input})
    await turn.emit({"role": "assistant", "text": "done"})
    return result


@app.agent("sleeper")
async def sleeper(turn: Turn) -> Any:
    """One durable timer of ``input["ms"]`` milliseconds, then a result."""
    assert isinstance(turn.input, dict)
    await turn.sleep(sleep_duration(int(turn.input["ms"])))
    return {"slept_ms": turn.input["ms"]}


def sleep_duration(ms: int) -> Any:
    """``ms`` as ``Turn.sleep`` takes it: a ``sleep(ms)`` gets milliseconds, any other
    signature a ``timedelta`` (unambiguous whatever unit a plain number means there)."""
    params = list(inspect.signature(Turn.sleep).parameters)
    if len(params) > 1 and params[1] == "ms":
        return ms
    return timedelta(milliseconds=ms)
