"""Failures the runtime names when an Attempt ends badly through no error of its own type.

The agent's code let a ``CancelledError`` out although nothing cancelled it, or returned while
an uncertain step was in flight; the errors of deployed code that no retry can fix, and which
failures are final (:func:`final_failure`); and a storage refusal as the failure it makes of
an Attempt, and the one retry a refused commit gets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from threadline.errors import (
    NonRetryable,
    RetryableAgentError,
    StorageError,
    StorageValueTooLarge,
    ValidationFailed,
)

T = TypeVar("T")


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
#: submission at once instead of spending ``max_attempts`` on backoffs, unless the step they
#: came out of says otherwise (``RetryPolicy.retry_unfixable``).
UNFIXABLE: tuple[type[BaseException], ...] = (ImportError, NameError, SyntaxError)


def final_failure(exc: BaseException, retried: Sequence[BaseException] = ()) -> bool:
    """Whether an Attempt that failed with ``exc`` fails its submission at once.

    A refused argument or value (``ValidationFailed``) would be refused again, and
    ``NonRetryable`` says so itself; an :data:`UNFIXABLE` error is final too, unless it is one
    of ``retried``: the very exceptions a step let out after trying them as its
    ``RetryPolicy.retry_unfixable`` asked (by identity, so the same type raised anywhere else
    is still final).
    """
    if isinstance(exc, (NonRetryable, ValidationFailed)):
        return True
    return isinstance(exc, UNFIXABLE) and not any(exc is allowed for allowed in retried)


def commit_twice(commit: Callable[[], T]) -> T:
    """Run ``commit``; if storage refuses it, once more. A value refused as too large would be
    refused again, so that refusal is not retried."""
    try:
        return commit()
    except StorageValueTooLarge:
        raise
    except StorageError:
        return commit()


def refusal_as_failure(refused: StorageError) -> BaseException:
    """A storage refusal as an Attempt failure: final when the value is too large for a row."""
    if isinstance(refused, StorageValueTooLarge):
        return NonRetryable(f"storage refused a value as too large: {refused.message}")
    return refused


__all__ = [
    "UNFIXABLE",
    "AgentCancelled",
    "StepLeftInFlight",
    "commit_twice",
    "final_failure",
    "refusal_as_failure",
]
