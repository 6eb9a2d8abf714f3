"""The Turn a Pydantic AI run is durable in, found by the code that runs inside it.

:func:`~threadline.pydantic_ai.run_durably` sets it around one ``agent.run``; the capability's
hooks, the operation backend, the text stream and the HTTP transport read it from here. A
context variable, so the tasks a run starts see it, and two Turns running at once in one object
(two Threads' Attempts) never see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from threadline.threads.turn import Turn


@dataclass(frozen=True, slots=True)
class ActiveRun:
    """One durable run: the Turn its steps journal into, and the capability's options."""

    turn: Turn
    #: The record kind of the user's prompt and of each streamed model message.
    message_kind: str


_ACTIVE: ContextVar[ActiveRun | None] = ContextVar("threadline_pydantic_ai_run", default=None)


def active_run() -> ActiveRun | None:
    """The durable run the caller is inside, if any."""
    return _ACTIVE.get()


@contextmanager
def running(run: ActiveRun) -> Iterator[ActiveRun]:
    """Make ``run`` the active one for the code inside (and the tasks it starts)."""
    token = _ACTIVE.set(run)
    try:
        yield run
    finally:
        _ACTIVE.reset(token)


__all__ = ["ActiveRun", "active_run", "running"]
