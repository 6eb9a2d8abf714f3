"""``Space``: one object's logic, independent of the platform it runs on.

The deployed Durable Object (``threadline.worker.ThreadObjectBase``) and the simulated one in
``threadline.testing`` are thin wrappers around a ``Space``, so tests run the deployed logic.
"""

from __future__ import annotations

import random

from threadline.api.context import ApiContext
from threadline.api.http import Request, Response
from threadline.api.routes import route
from threadline.app import Application
from threadline.clock import Clock, SystemClock
from threadline.ids import IdSource, RandomIds
from threadline.maintenance import run_pass
from threadline.scheduling import Failpoints, Scheduler, build_scheduler
from threadline.storage.port import Storage
from threadline.storage.schema import migrate, schema_version
from threadline.threads.runtime import ThreadRuntime


class Space:
    """The Threads of one space, over one storage, clock, randomness and id source."""

    def __init__(
        self,
        app: Application,
        storage: Storage,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        ids: IdSource | None = None,
        failpoints: Failpoints | None = None,
    ) -> None:
        self.app = app
        self.storage = storage
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.rng = rng if rng is not None else random.SystemRandom()
        self.ids: IdSource = ids if ids is not None else RandomIds(self.rng)
        self.schema_version = 0
        self.scheduler: Scheduler = build_scheduler(
            storage, self.clock, app.config, self.rng, failpoints
        )
        self.runtime = ThreadRuntime(
            storage,
            app.agents,
            gate=self.scheduler.gate,
            failpoints=self.scheduler.failpoints,
            config=app.config,
            clock=self.clock,
            rng=self.rng,
            ids=self.ids,
        )
        self.api = ApiContext(
            storage=storage,
            ledger=self.runtime.ledger,
            agents=app.agents,
            config=app.config,
            clock=self.clock,
            due_queue=self.scheduler.due_queue,
            wake=self.scheduler.alarm.schedule_now,
            schema_version=lambda: self.schema_version,
            changes=self.scheduler.gate,
        )

    async def start(self) -> None:
        """Bring the schema up to date and learn the alarm slot. Runs before any event."""
        migrate(self.storage)
        self.schema_version = schema_version(self.storage)
        await self.storage.get_alarm()

    async def handle(self, request: Request) -> Response:
        """Answer one HTTP request addressed to this space."""
        return await route(self.api, request)

    async def alarm(self, retry_count: int = 0) -> None:
        """Run one maintenance pass for a fired alarm (the platform has emptied the slot)."""
        await self.storage.get_alarm()
        await run_pass(self)


__all__ = ["Space"]
