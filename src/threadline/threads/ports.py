"""What the thread runtime needs from the scheduling substrate, stated as protocols.

The runtime is written against these two shapes, which ``threadline.scheduling`` provides; the
protocols keep the dependency one-way and name exactly the surface the runtime relies on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from threadline.scheduling.due_queue import DELAYED, MESSAGES, NATIVE, PUBLICATION

T = TypeVar("T")


class MutationGate(Protocol):
    """Commits source facts together with lane enrollment, generation bump and alarm."""

    def mutate(
        self,
        fn: Callable[[], T],
        *,
        lanes: Sequence[str] = (),
        invalidates_recovery: bool = True,
        threads: Sequence[str] | None = None,
    ) -> T:
        """Run ``fn`` in one storage transaction with the gate's bookkeeping; ``threads``
        names every Thread whose open work ``fn`` may change (None: not known)."""
        ...

    def schedule(self, lane_id: str, due_at: int, progress_cursor: int | None = None) -> None:
        """Make ``lane_id`` due no later than ``due_at`` (inside the current transaction)."""
        ...

    def record_progress(self, lanes: Sequence[str]) -> None:
        """Mark the current source transaction as a real new fact for ``lanes``."""
        ...

    def record_admission(self, threads: Sequence[str]) -> None:
        """Mark the current source transaction as admitting input to ``threads`` (new native
        work, even when an Attempt of the pass admits it)."""
        ...

    def schedule_fact(self, lane_id: str, due_at: int) -> None:
        """Make ``lane_id`` due at ``due_at`` for a new fact of the current transaction."""
        ...


class Failpoints(Protocol):
    """Named crash points; production runs a no-op, tests raise ``Evicted`` at one."""

    def hit(self, location: str) -> None:
        """Synchronous failpoint."""
        ...

    async def reached(self, location: str) -> None:
        """Asynchronous failpoint."""
        ...



def commit_fact(
    gate: MutationGate,
    fn: Callable[[], T],
    lanes: Sequence[str] = (NATIVE,),
    *,
    thread: str | None = None,
) -> T:
    """Commit ``fn`` as a real new fact for ``lanes``: its rows, their progress and the alarm.

    One transaction through the gate. The body is synchronous, so its facts and their
    enrollment commit together; the gate's prearm (the crash fallback of bodies that await)
    would only enroll the same lanes a second time, so it is skipped. Recording progress
    advances the generation for native (and publication) work and replenishes the lanes'
    retry budget, as a new fact should. ``thread``, when ``fn`` changes the open work of that
    Thread only, lets a running pass read just that Thread again.
    """

    def body() -> T:
        result = fn()
        gate.record_progress(lanes)
        return result

    return gate.mutate(body, invalidates_recovery=False,
                       threads=None if thread is None else (thread,))


__all__ = [
    "DELAYED", "MESSAGES", "NATIVE", "PUBLICATION", "Failpoints", "MutationGate", "commit_fact",
]
