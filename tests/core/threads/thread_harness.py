"""A rebuildable thread runtime over one SQLite storage, for core and fault tests.

``evict()`` drops every in-memory object (scheduler, gate, failpoints, runtime, registry) and
rebuilds them from the same storage, as a new object incarnation would.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.ids import RandomIds
from threadline.scheduling import Failpoints, Scheduler, build_scheduler
from threadline.storage import SqliteStorage
from threadline.threads.model import Settlement, Submission
from threadline.threads.recovery import RecoverySweepResult
from threadline.threads.runtime import ThreadRuntime


@dataclass
class Effects:
    """What agents did to the outside world; survives eviction like the world would."""

    calls: dict[str, int] = field(default_factory=dict)

    def hit(self, name: str) -> int:
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.calls[name]

    def count(self, name: str) -> int:
        return self.calls.get(name, 0)


class Harness:
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

    def admit(self, thread: str, input: Any, *, agent: str = "echo", key: str | None = None
              ) -> Submission:
        return self.ledger.admit(thread, agent, input, key).submission

    def get(self, submission_id: str) -> Submission:
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
        raise AssertionError("the runtime did not quiesce")

    def settled_records(self, submission_id: str) -> int:
        row = self.storage.exec(
            "SELECT COUNT(*) AS n FROM tl_outbox WHERE record_id = ?", f"{submission_id}:settled"
        ).one()
        return int(row["n"])
