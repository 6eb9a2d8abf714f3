"""The thread harness: the lower-level tool for testing the thread runtime itself.

:class:`ThreadHarness` drives ``process_thread_head`` directly, without the maintenance pass,
over one storage and a manual clock, and rebuilds every in-memory part on :meth:`evict`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import Conflict
from threadline.ids import RandomIds
from threadline.scheduling import Failpoints, Scheduler, build_scheduler
from threadline.storage import SqliteStorage
from threadline.testing.alarm_invariants import QuiescenceError
from threadline.threads.model import Settlement, Submission
from threadline.threads.recovery import RecoverySweepResult
from threadline.threads.runtime import ThreadRuntime

_SETTLED_RECORDS = "SELECT COUNT(*) AS n FROM tl_history WHERE record_id = ?"


class ThreadHarness:
    """Drives the thread runtime directly, without the maintenance pass.

    For tests of the runtime itself: :meth:`step` recovers a Thread and runs its head once,
    :meth:`drive` repeats that until nothing changes (time does not move). ``evict()`` drops
    every in-memory part (scheduler, gate, failpoints, runtime, registry) and rebuilds them from
    the same storage, as a new incarnation would. ``make_app`` is called for each incarnation.
    """

    def __init__(
        self,
        storage: SqliteStorage,
        clock: ManualClock,
        make_app: Callable[[], Application],
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.make_app = make_app
        self.incarnation = 0
        self.build()

    def build(self) -> None:
        """Build one incarnation over the storage."""
        self.incarnation += 1
        self.app = self.make_app()
        self.rng = random.Random(self.incarnation)
        self.failpoints = Failpoints()
        self.scheduler: Scheduler = build_scheduler(
            self.storage, self.clock, self.app.config, self.rng, self.failpoints
        )
        self.scheduler.gate.ensure_alarm()
        self.runtime = ThreadRuntime(
            self.storage,
            self.app.agents,
            gate=self.scheduler.gate,
            failpoints=self.failpoints,
            config=self.app.config,
            clock=self.clock,
            rng=self.rng,
            ids=RandomIds(random.Random(1000 + self.incarnation)),
        )
        self.ledger = self.runtime.ledger

    def evict(self) -> None:
        """Lose the object: rebuild every in-memory part from the same storage."""
        self.build()

    def admit(
        self, thread: str, input: Any, *, agent: str = "echo", key: str | None = None
    ) -> Submission:
        """Admit ``input`` for ``agent`` on ``thread``."""
        admitted = self.ledger.admit(thread, agent, input, key).submission
        if not isinstance(admitted, Submission):
            raise Conflict(f"idempotency key {key!r} names a scheduled submission",
                           field="idempotency_key")
        return admitted

    def get(self, submission_id: str) -> Submission:
        """Read one submission."""
        return self.ledger.get(submission_id)

    async def step(self, thread: str) -> tuple[RecoverySweepResult, Settlement | None]:
        """What one pass does for one Thread: recover it, then run its head once."""
        recovered = self.runtime.run_recovery(thread)
        settled = await self.runtime.process_thread_head(thread)
        return recovered, settled

    async def drive(self, *, rounds: int = 50) -> list[Settlement]:
        """Run every Thread until nothing changes any more (time does not move)."""
        settled: list[Settlement] = []
        for _ in range(rounds):
            before = self.ledger.scan_nonterminal()
            for thread in sorted({item.thread_id for item in before}):
                _, settlement = await self.step(thread)
                if settlement is not None:
                    settled.append(settlement)
            if self.ledger.scan_nonterminal() == before:
                return settled
        raise QuiescenceError("the runtime did not quiesce")

    def settled_records(self, submission_id: str) -> int:
        """How many ``submission.settled`` records the Thread's log holds for the submission."""
        row = self.storage.exec(_SETTLED_RECORDS, f"{submission_id}:settled").one()
        return int(row["n"])


__all__ = ["ThreadHarness"]
