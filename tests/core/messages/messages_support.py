"""Helpers for the message tests: an app whose agents send and receive messages, and reads of
what a space's database holds about them."""

from __future__ import annotations

from typing import Any

from threadline import Application, RuntimeConfig, Turn
from threadline.storage.port import Storage
from threadline.testing import SimulatedDeployment, SimulatedObject
from threadline.threads.history import read_history
from threadline.threads.message_rows import Message, of_submission

START = 1_700_000_000_000
# Short backoffs keep the simulated time small; the rules are the same.
CONFIG = RuntimeConfig(alarm_backoff_base_ms=100, alarm_backoff_cap_ms=2_000)


def build_app(config: RuntimeConfig = CONFIG) -> Application:
    """``forward`` sends its input to ``{"space", "thread", "agent"?}`` and returns the
    message id; ``echo`` returns what it got; ``fanout`` sends two messages."""
    app = Application(config)

    @app.agent("forward")
    async def forward(turn: Turn) -> Any:
        target = turn.input
        assert isinstance(target, dict)
        sent = await turn.send(target["space"], target["thread"], {"text": target["text"]},
                               agent=target.get("agent", "echo"))
        return {"sent": sent}

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return await turn.step("say", lambda: {"got": turn.input})

    @app.agent("fanout")
    async def fanout(turn: Turn) -> Any:
        target = turn.input
        assert isinstance(target, dict)
        first = await turn.send(target["space"], "inbox-1", {"n": 1}, agent="echo")
        second = await turn.send(target["space"], "inbox-2", {"n": 2}, agent="echo")
        return {"sent": [first, second]}

    return app


def forward(space: str, thread: str, text: str = "hi", **extra: Any) -> dict[str, Any]:
    """A ``forward`` input."""
    return {"space": space, "thread": thread, "text": text, **extra}


def sent(obj: SimulatedObject, submission_id: str) -> list[Message]:
    """The messages the submission sent."""
    return of_submission(obj.storage, submission_id)


def history(storage: Storage, thread: str) -> list[dict[str, Any]]:
    """The Thread's log, oldest first."""
    return read_history(storage, thread, limit=1_000)


def deployment(*, seed: int = 0) -> SimulatedDeployment:
    from threadline import ManualClock

    return SimulatedDeployment(build_app(), clock=ManualClock(START), seed=seed,
                               spaces=("a", "b"), check_alarm_invariant=True)
