"""A space with something stuck for an operator to recover, driven from synchronous tests: a
queue subscriber parked on an oversized record, a subscriber parked by its destination's
refusal, and a parked host lane; and the Worker's edge in front of it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import httpx

from threadline import (
    Application,
    DeliveryRefused,
    LaneContext,
    ManualClock,
    Record,
    Turn,
    access,
)
from threadline.api import edge
from threadline.api.http import Request, Response
from threadline.config import RuntimeConfig
from threadline.testing import SimulatedObject

START = 1_700_000_000_000
KEYS = "k1:" + "s" * 40
BASE = "http://threadline.test"
OPERATOR = "ops:carol"


class FakeQueue:
    """A Queue producer binding that keeps every call's bodies."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []

    async def send_batch(self, bodies: Sequence[Any]) -> None:
        self.calls.append(list(bodies))

    def sent(self) -> list[tuple[int, str]]:
        return [(body["record"]["seq"], body["record"]["kind"])
                for call in self.calls for body in call]


class Stuck:
    """The space ``acme`` with ``audit`` parked on record seq 3 of Thread t1 (over the Queue's
    size limit), ``crm`` parked by a refusal, and the host lane ``poll`` parked."""

    def __init__(self) -> None:
        self.queue = FakeQueue()
        self.crm_fixed = False
        self.poll_fixed = False
        self.crm: list[Record] = []
        config = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000,
                               park_after_stalls=3)
        app = Application(config)

        @app.agent("writer")
        async def writer(turn: Turn) -> dict[str, Any]:
            await turn.emit(turn.input, kind="note")
            return {"ok": True}

        app.queue("audit", binding="EVENTS")

        @app.subscriber("crm")
        async def crm(batch: list[Record]) -> None:
            if not self.crm_fixed:
                raise DeliveryRefused("crm refused the batch", detail="HTTP 400")
            self.crm.extend(batch)

        @app.lane("poll")
        async def poll(ctx: LaneContext) -> datetime | None:
            return None if self.poll_fixed else ctx.now + timedelta(minutes=1)

        self.obj = SimulatedObject(app, clock=ManualClock(START), space="acme",
                                   env={"EVENTS": self.queue}, check_alarm_invariant=True)
        asyncio.run(self.obj.start())
        for body in ({"n": 1}, {"text": "x" * 130_000}, {"n": 3}):
            self.obj.admit("t1", "writer", body)
            self.settle()
        self.obj.wake_lane("poll")
        self.settle()
        self.edge = edge.Edge(edge.EdgeConfig(
            signing_keys=access.SigningKeys.parse(KEYS),
            max_body_bytes=app.config.max_body_bytes), self.obj.clock)

    def settle(self) -> None:
        """Fire the alarm for ten simulated minutes."""
        asyncio.run(self.obj.run_alarms(until=self.obj.clock.now_ms() + 600_000))

    def token(self, *capabilities: str) -> str:
        return access.mint(KEYS, space="acme", capabilities=capabilities or ("admin",),
                           ttl=timedelta(days=1), subject=OPERATOR,
                           now_ms=self.obj.clock.now_ms())

    async def answer(self, request: Request) -> Response:
        """What the Worker does: edge checks, then the object."""
        return await self.edge.serve(request, lambda name, forwarded: self.obj.space.handle(
            forwarded))

    def call(self, method: str, path: str, body: Any = None, *, token: str) -> Response:
        raw = b"" if body is None else json.dumps(body).encode()
        request = Request.from_url(method, BASE + path, {"authorization": f"Bearer {token}"},
                                   raw)
        return asyncio.run(self.answer(request))

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            reply = asyncio.run(self.answer(Request.from_url(
                request.method, str(request.url), dict(request.headers), request.content)))
            return httpx.Response(reply.status, headers=reply.headers, content=reply.body)

        return httpx.MockTransport(handle)

    def async_transport(self) -> httpx.MockTransport:
        async def handle(request: httpx.Request) -> httpx.Response:
            reply = await self.answer(Request.from_url(
                request.method, str(request.url), dict(request.headers), request.content))
            return httpx.Response(reply.status, headers=reply.headers, content=reply.body)

        return httpx.MockTransport(handle)

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        storage = self.obj.storage
        tables = [str(item["name"]) for item in storage.exec(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tl_%'")]
        return {table: sorted((tuple(item.values())
                               for item in storage.exec(f"SELECT * FROM {table}")), key=repr)
                for table in tables}

    def close(self) -> None:
        self.obj.close()
