"""``RetryPolicy``: how often a step's function is tried within one Attempt, and how long it
waits when a provider asks it to (``RetryAfter``). Validated when built, frozen after."""

from __future__ import annotations

from dataclasses import dataclass, field

from threadline.errors import NonRetryable, RetryAfter
from threadline.threads.attempt_errors import UNFIXABLE

#: Bounds a RetryPolicy is checked against when it is built.
MAX_STEP_TRIES = 100
MAX_STEP_DELAY_MS = 3_600_000
MAX_BACKOFF = 1_000.0

#: Bounds of ``RetryPolicy.max_waits`` and ``max_wait_ms``.
MAX_STEP_WAITS = 100
MAX_WAIT_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a step's function is tried within one Attempt before the Attempt fails.

    The default tries once: a failing step fails the Attempt, and the submission's own retry
    policy (``RuntimeConfig.max_attempts`` with backoff) takes over. Exceptions of a type in
    ``non_retryable`` (and :class:`~threadline.NonRetryable`) are never retried here.

    A :class:`~threadline.RetryAfter` raised by the function is no failed try: the step waits
    as it asks and runs again, at most ``max_waits`` times (0 to 100) and only for a wait of
    at most ``max_wait_ms`` (up to a day); past either bound it counts as a failed try.

    Errors no retry of the same code can fix (``ImportError``, ``NameError``, ``SyntaxError``
    and their subclasses: :data:`~threadline.threads.attempt_errors.UNFIXABLE`) are not tried
    again and fail the submission at once, unless their type is in ``retry_unfixable``: then
    the step tries them again like any error, and once its tries are spent the Attempt is
    retried too, within ``max_attempts`` and with backoff, instead of failing the submission
    (a module whose import fails now and then, or a fix deployed between two Attempts). Each
    type there must be one of those or a subclass; ``non_retryable`` still wins over it.
    """

    max_attempts: int = 1
    initial_delay_ms: int = 0
    backoff: float = 2.0
    max_delay_ms: int = 60_000
    non_retryable: tuple[type[BaseException], ...] = field(default=())
    max_waits: int = 10
    max_wait_ms: int = 3_600_000
    retry_unfixable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if not _is_int(self.max_attempts) or not 1 <= self.max_attempts <= MAX_STEP_TRIES:
            raise ValueError(f"max_attempts must be an int from 1 to {MAX_STEP_TRIES}")
        for name in ("initial_delay_ms", "max_delay_ms"):
            delay = getattr(self, name)
            if not _is_int(delay) or not 0 <= delay <= MAX_STEP_DELAY_MS:
                raise ValueError(f"{name} must be an int from 0 to {MAX_STEP_DELAY_MS}")
        if (
            isinstance(self.backoff, bool)
            or not isinstance(self.backoff, (int, float))
            or not 1 <= self.backoff <= MAX_BACKOFF
        ):
            raise ValueError(f"backoff must be a number from 1 to {MAX_BACKOFF:g}")
        if not isinstance(self.non_retryable, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException)
            for kind in self.non_retryable
        ):
            raise ValueError("non_retryable must be a tuple of exception types")
        if not _is_int(self.max_waits) or not 0 <= self.max_waits <= MAX_STEP_WAITS:
            raise ValueError(f"max_waits must be an int from 0 to {MAX_STEP_WAITS}")
        if not _is_int(self.max_wait_ms) or not 0 <= self.max_wait_ms <= MAX_WAIT_MS:
            raise ValueError(f"max_wait_ms must be an int from 0 to {MAX_WAIT_MS}")
        if not isinstance(self.retry_unfixable, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, UNFIXABLE)
            for kind in self.retry_unfixable
        ):
            raise ValueError(
                "retry_unfixable must be a tuple of ImportError, NameError or SyntaxError types"
                " (or their subclasses): any other error is retried without it"
            )

    def waits_for(self, asked: RetryAfter, waited: int) -> bool:
        """Whether a step that already waited ``waited`` times waits as ``asked`` once more."""
        return waited < self.max_waits and asked.delay_ms <= self.max_wait_ms

    def retries(self, exc: Exception, tried: int) -> bool:
        """Whether a step that raised ``exc`` on try number ``tried`` is tried again."""
        if tried >= self.max_attempts or isinstance(exc, NonRetryable):
            return False
        if isinstance(exc, UNFIXABLE) and not self.retries_unfixable(exc):
            return False
        return not isinstance(exc, self.non_retryable)

    def retries_unfixable(self, exc: BaseException) -> bool:
        """Whether ``exc``, an error no retry of the same code can fix, is retried anyway:
        its type is in ``retry_unfixable`` and not in ``non_retryable``."""
        return (isinstance(exc, UNFIXABLE) and isinstance(exc, self.retry_unfixable)
                and not isinstance(exc, self.non_retryable))

    def delay_ms(self, tried: int) -> int:
        """The pause before try number ``tried + 1``: exponential, never above ``max_delay_ms``.

        The growth is clamped as it is computed, so a large ``backoff`` cannot overflow.
        """
        delay = float(self.initial_delay_ms)
        for _ in range(max(0, tried - 1)):
            if delay >= self.max_delay_ms:
                break
            delay *= self.backoff
        return int(min(delay, self.max_delay_ms))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = ["MAX_BACKOFF", "MAX_STEP_DELAY_MS", "MAX_STEP_TRIES", "MAX_STEP_WAITS", "MAX_WAIT_MS",
           "RetryPolicy"]
