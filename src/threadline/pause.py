"""The pause port: how a long pass gives its object back to the platform between Attempts.

A pass whose Attempts await no real I/O runs its whole length as one uninterrupted stretch of
the object's event loop: a request that arrives meanwhile waits for the pass to end. Between
Attempts (and before each lane wave) the pass awaits a :class:`Pause`, so the platform can
deliver the requests waiting for the object; what they admit is seen by the pass's next scan.

What lets workerd deliver another event was measured there (``tests/workerd/
test_workerd_yield.py``): a JavaScript ``setTimeout`` does; ``asyncio.sleep(0)``, an
``asyncio.sleep`` of a millisecond and a resolved promise do not (they never leave the
microtask queue of the running event). The deployed object injects the ``setTimeout`` pause
(``threadline.worker``); the core's default, :func:`no_pause`, returns without suspending, so
the CPython core and its ManualClock tests keep their exact interleavings and never wait on
wall time.
"""

from __future__ import annotations

from typing import Protocol


class Pause(Protocol):
    """An await that lets the platform deliver other events to the object, then returns."""

    async def __call__(self) -> None:
        """Give the object back to the platform once."""
        ...


async def no_pause() -> None:
    """The core's pause: returns at once, without suspending."""


__all__ = ["Pause", "no_pause"]
