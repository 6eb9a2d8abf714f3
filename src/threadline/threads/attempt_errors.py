"""Failures the runtime names when an Attempt ends badly through no error of its own type.

The agent's code let a ``CancelledError`` out although nothing cancelled it, or returned while
an uncertain step was in flight; and the errors of deployed code that no retry can fix.
"""

from __future__ import annotations

from threadline.errors import RetryableAgentError


class AgentCancelled(RetryableAgentError):
    """The agent's code raised ``CancelledError`` although nothing cancelled its Attempt."""

    def __init__(self) -> None:
        super().__init__("the agent raised CancelledError without its Attempt being cancelled")


class StepLeftInFlight(Exception):
    """The agent returned while one of its uncertain steps was still in flight."""

    def __init__(self) -> None:
        super().__init__("the agent returned before an uncertain step's result was journaled")


#: Errors of the deployed code itself (a module that does not import, a name that is not
#: defined, a syntax error): no retry of the same code can succeed, so they fail the
#: submission at once instead of spending ``max_attempts`` on backoffs.
UNFIXABLE: tuple[type[BaseException], ...] = (ImportError, NameError, SyntaxError)


__all__ = ["UNFIXABLE", "AgentCancelled", "StepLeftInFlight"]
