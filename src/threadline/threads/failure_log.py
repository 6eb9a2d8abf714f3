"""One log line per failed Attempt: what an operator reads on the console.

The submission's detail keeps the error's type and message; the console also gets where it
was raised. Each failed Attempt is logged once at ERROR on ``threadline.threads``, naming
the agent, the submission, the Thread, the Attempt and what happens next (a retry at a time,
the submission failed for good, or an Unknown Outcome for an operator), with the exception's
traceback cut to its last frames and a bounded length, so a deep or looping stack cannot
flood the log.

:class:`FailureLog` is the runtime's door to that line: it also counts the failed Attempts
and remembers the latest :data:`LISTED_FAILURES`, so that a maintenance pass can report
which Attempts failed while it ran (``PassReport.failed_attempts``).
"""

from __future__ import annotations

import logging
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from threadline.threads.model import Submission, error_envelope

_logger = logging.getLogger("threadline.threads")

#: The innermost frames of a traceback that are logged.
TRACEBACK_FRAMES = 12
#: The most characters of a traceback that are logged.
TRACEBACK_CHARS = 4_000


def bounded_traceback(exc: BaseException) -> str:
    """``exc``'s traceback, its last :data:`TRACEBACK_FRAMES` frames, cut to
    :data:`TRACEBACK_CHARS` characters (the end kept: that is where it was raised)."""
    try:
        text = "".join(traceback.format_exception(exc, limit=-TRACEBACK_FRAMES)).rstrip()
    except Exception:  # a foreign exception that cannot be formatted still gets its line
        text = f"{type(exc).__name__} (its traceback could not be formatted)"
    if len(text) > TRACEBACK_CHARS:
        text = f"... ({len(text) - TRACEBACK_CHARS} characters cut)\n" + text[-TRACEBACK_CHARS:]
    return text


#: The failed Attempts a :class:`FailureLog` remembers, and a pass report lists.
LISTED_FAILURES = 10


def log_failed_attempt(
    exc: BaseException,
    submission: Submission,
    *,
    attempt: int,
    retry_at: int | None,
    log: Callable[[str], None] | None = None,
    unknown: bool = False,
) -> None:
    """Log the failure ``exc`` of ``submission``'s Attempt ``attempt``: retried at
    ``retry_at`` (epoch ms), or, when it is None, the submission failed for good (or, with
    ``unknown``, it waits as an Unknown Outcome: an uncertain step was in flight)."""
    agent, thread = submission.agent, submission.thread_id
    error = error_envelope(exc, attempt=attempt)
    then = ("an Unknown Outcome: an uncertain step was in flight" if unknown
            else f"retried at {retry_at}" if retry_at is not None
            else "the submission failed for good")
    (log if log is not None else _logger.error)(
        f"threadline: agent {agent!r} failed attempt {attempt} of submission {submission.id!r}"
        f" in thread {thread!r} ({then}): {error['type']}: {error['message']}\n"
        + bounded_traceback(exc)
    )


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """A failed Attempt as a pass report names it: whose it was and the error's type."""

    submission_id: str
    thread_id: str
    agent: str
    attempt: int
    error_type: str

    def as_json(self) -> dict[str, str | int]:
        """The mapping a pass report stores and shows."""
        return {"submission_id": self.submission_id, "thread_id": self.thread_id,
                "agent": self.agent, "attempt": self.attempt, "error_type": self.error_type}


class FailureLog:
    """Logs each failed Attempt of one runtime, counts them, and keeps the latest ones.

    Memory only, for this incarnation: :meth:`since` tells a pass how many failed after it
    took :attr:`count`, and which (at most the latest :data:`LISTED_FAILURES`).
    """

    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        self._log = log
        #: Failed Attempts logged so far.
        self.count = 0
        self._latest: deque[tuple[int, AttemptFailure]] = deque(maxlen=LISTED_FAILURES)

    def failed(
        self, exc: BaseException, submission: Submission, *, attempt: int,
        retry_at: int | None, unknown: bool = False,
    ) -> None:
        """Log the failure (see :func:`log_failed_attempt`) and remember it."""
        log_failed_attempt(exc, submission, attempt=attempt, retry_at=retry_at, log=self._log,
                           unknown=unknown)
        self.count += 1
        kind = error_envelope(exc, attempt=attempt)["type"]
        self._latest.append((self.count, AttemptFailure(
            submission.id, submission.thread_id, submission.agent, attempt, kind)))

    def since(self, mark: int) -> tuple[int, tuple[AttemptFailure, ...]]:
        """How many Attempts failed after :attr:`count` was ``mark``, and the latest of them
        (oldest first)."""
        return self.count - mark, tuple(seen for number, seen in self._latest if number > mark)


__all__ = [
    "LISTED_FAILURES",
    "TRACEBACK_CHARS",
    "TRACEBACK_FRAMES",
    "AttemptFailure",
    "FailureLog",
    "bounded_traceback",
    "log_failed_attempt",
]
