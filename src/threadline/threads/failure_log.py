"""One log line per failed Attempt: what an operator reads on the console.

The submission's detail keeps the error's type and message; the console also gets where it
was raised. Each failed Attempt is logged once at ERROR on ``threadline.threads``, naming
the agent, the submission, the Thread, the Attempt and what happens next (a retry at a time,
or the submission failed for good), with the exception's traceback cut to its last frames
and a bounded length, so a deep or looping stack cannot flood the log.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

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


def log_failed_attempt(
    exc: BaseException,
    submission: Submission,
    *,
    attempt: int,
    retry_at: int | None,
    log: Callable[[str], None] | None = None,
) -> None:
    """Log the failure ``exc`` of ``submission``'s Attempt ``attempt``: retried at
    ``retry_at`` (epoch ms), or, when it is None, the submission failed for good."""
    agent, thread = submission.agent, submission.thread_id
    error = error_envelope(exc, attempt=attempt)
    then = (f"retried at {retry_at}" if retry_at is not None
            else "the submission failed for good")
    (log if log is not None else _logger.error)(
        f"threadline: agent {agent!r} failed attempt {attempt} of submission {submission.id!r}"
        f" in thread {thread!r} ({then}): {error['type']}: {error['message']}\n"
        + bounded_traceback(exc)
    )


__all__ = ["TRACEBACK_CHARS", "TRACEBACK_FRAMES", "bounded_traceback", "log_failed_attempt"]
