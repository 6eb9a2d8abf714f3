"""Helpers for the maintenance-pass tests: a Space over SQLite driven like the platform does."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.ids import RandomIds
from threadline.maintenance import PassReport
from threadline.pause import Pause
from threadline.scheduling import Failpoints, read_state
from threadline.space import Space
from threadline.storage import SqliteStorage
from threadline.storage.meter import MeterReading
from threadline.threads.model import Submission

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)


class Obj:
    """One object over one storage; ``evict()`` rebuilds every in-memory part."""

    def __init__(
        self,
        storage: SqliteStorage,
        clock: ManualClock,
        make_app: Callable[[], Application],
        pause: Pause | None = None,
    ) -> None:
        self.storage = storage
        self.pause = pause
        self.clock = clock
        self.make_app = make_app
        self.incarnation = 0
        self.logs: list[str] = []
        self._build()

    def _build(self) -> None:
        self.incarnation += 1
        self.app = self.make_app()
        self.failpoints = Failpoints()
        self.space = Space(
            self.app, self.storage, clock=self.clock,
            rng=random.Random(self.incarnation),
            ids=RandomIds(random.Random(1_000 + self.incarnation)),
            failpoints=self.failpoints,
            pause=self.pause,
        )
        self.space.maintenance._log = self.logs.append
        self.space.lanes._log = self.logs.append

    async def start(self) -> None:
        await self.space.start()

    async def evict(self) -> None:
        """Lose the object and start a new incarnation over the same storage."""
        self._build()
        await self.start()

    def admit(self, thread: str, input: Any = None, *, agent: str = "echo") -> Submission:
        return self.space.runtime.ledger.admit(thread, agent, input).submission

    def get(self, submission_id: str) -> Submission:
        return self.space.runtime.ledger.get(submission_id)

    async def fire(self) -> PassReport:
        """Fire the slot now, as the platform does (it empties the slot first)."""
        self.storage.take_due_alarm(self.clock.now_ms())
        return await self.space.alarm()

    async def run(self, *, max_passes: int = 50) -> list[PassReport]:
        """Fire the alarm at its time until the slot is empty."""
        reports: list[PassReport] = []
        for _ in range(max_passes):
            slot = self.storage.known_alarm()
            if slot is None:
                return reports
            self.clock.set(max(slot, self.clock.now_ms()))
            reports.append(await self.fire())
        raise AssertionError(f"no quiescence after {max_passes} passes: {reports[-3:]}")

    def generation(self) -> tuple[int, int]:
        state = read_state(self.storage)
        return state.dirty, state.processed

    def cost(self) -> MeterReading:
        return self.storage.meter.reading()


def echo_app(config: RuntimeConfig = CONFIG) -> Application:
    app = Application(config)

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        return {"echo": turn.input}

    return app


def run(coro: Any) -> Any:
    return asyncio.run(coro)
