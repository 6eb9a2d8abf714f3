"""The space's name survives the incarnations that are not given it.

The platform gives an object its name (``ctx.id.name``) when a request or an RPC reaches it,
not when its alarm starts it after an eviction or a restart. The object stores the name the
first time it learns it (at start from the platform, or from the ``{space}`` of a request
that writes), and an incarnation given none uses the stored one: subscribers' envelopes
still name the space and a message into the object's own space is still admitted locally.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from messages_support import START, build_app, forward, sent

from threadline import Application, ManualClock, SqliteStorage, Turn
from threadline.api.http import Request
from threadline.delivery.subscribers import DeliveryContext, SubscriberSpec
from threadline.maintenance.publication_lane import DELIVERING
from threadline.scheduling import state as generation
from threadline.space import Space
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.records import Record


def _audited(seen: list[str]) -> Application:
    """The message app plus ``say`` (emits its input as a record) and a subscriber that
    notes the space each batch was delivered for."""
    app = build_app()

    @app.agent("say")
    async def say(turn: Turn) -> None:
        await turn.emit(turn.input)

    async def audit(batch: list[Record], ctx: DeliveryContext) -> None:
        seen.append(ctx.space)

    app.subscribers.add(SubscriberSpec("audit", audit))
    return app


def _stored_name(obj: SimulatedObject) -> str | None:
    return generation.read_state(obj.storage).space_name


def test_an_object_started_by_its_alarm_with_no_name_given_still_knows_its_space() -> None:
    async def go() -> None:
        seen: list[str] = []
        # No router: a message the object took for another space's would fail with NoRoute.
        async with SimulatedObject(_audited(seen), clock=ManualClock(START), space="acme",
                                   check_alarm_invariant=True) as obj:
            assert _stored_name(obj) == "acme"  # stored by the first start, which was named
            await obj.evict(named=False)
            assert obj.space.name == "acme"
            sub = obj.admit("sender", "forward", forward("acme", "inbox"))
            obj.admit("log", "say", {"text": "hi"})
            await obj.run_alarms()
            assert obj.submission(sub.id).outcome is Outcome.COMPLETED
            (message,) = sent(obj, sub.id)
            (target,) = obj.submissions("inbox")
            # Admitted locally, in one transaction: no delivery attempt was charged.
            assert message.state == "delivered" and message.admitted_as == target.id
            assert message.attempts == 0
            assert target.outcome is Outcome.COMPLETED
            assert seen and set(seen) == {"acme"}

    asyncio.run(go())


def test_an_object_lost_in_its_alarm_handler_restarts_knowing_its_space() -> None:
    async def go() -> None:
        seen: list[str] = []
        async with SimulatedObject(_audited(seen), clock=ManualClock(START), space="acme",
                                   check_alarm_invariant=True) as obj:
            crash = obj.crash_at(DELIVERING)
            obj.admit("log", "say", {"text": "hi"})
            sub = obj.admit("sender", "forward", forward("acme", "inbox"))
            await obj.run_alarms()
            assert crash.fired and obj.evictions == 1
            assert obj.space.name == "acme"  # the unnamed incarnation the alarm restarted
            (message,) = sent(obj, sub.id)
            assert message.state == "delivered" and message.attempts == 0
            assert seen and set(seen) == {"acme"}

    asyncio.run(go())


def _request(method: str, path: str, body: bytes = b"") -> Request:
    return Request.from_url(method, path, {"content-type": "application/json"}, body)


def test_an_object_never_given_its_name_learns_it_from_the_first_request_that_writes() -> None:
    async def go() -> None:
        seen: list[str] = []
        async with SimulatedObject(_audited(seen), clock=ManualClock(START)) as obj:
            assert obj.space.name is None and _stored_name(obj) is None
            meter = obj.storage.meter
            before = meter.reading()
            read = await obj.space.handle(_request("GET", "/v1/spaces/acme/threads/inbox"))
            assert read.status == 200
            # A read names the space for this incarnation but writes nothing.
            assert (meter.reading() - before).rows_written == 0
            assert obj.space.name == "acme" and _stored_name(obj) is None
            refused = await obj.space.handle(_request(
                "POST", "/v1/spaces/acme/threads/inbox/submissions", b"{}"))
            assert refused.status >= 400 and _stored_name(obj) is None
            posted = await obj.space.handle(_request(
                "POST", "/v1/spaces/acme/threads/sender/submissions",
                b'{"agent": "forward", "input": {"space": "acme", "thread": "inbox",'
                b' "text": "hi"}}'))
            assert posted.status == 202, posted.body
            assert _stored_name(obj) == "acme"
            await obj.evict(named=False)
            assert obj.space.name == "acme"
            obj.admit("log", "say", {"text": "hi"})
            await obj.run_alarms()
            (target,) = obj.submissions("inbox")
            assert target.outcome is Outcome.COMPLETED
            assert set(seen) == {"acme"}

    asyncio.run(go())


def test_a_name_that_conflicts_with_the_stored_one_is_logged_and_the_stored_one_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def go() -> None:
        storage = SqliteStorage(":memory:")
        app = build_app()
        clock = ManualClock(START)
        first = Space(app, storage, clock=clock, name="acme")
        await first.start()
        with caplog.at_level(logging.WARNING, logger="threadline"):
            second = Space(app, storage, clock=clock, name="other")
            await second.start()
        assert second.name == "acme"
        assert second.publication.space == "acme" and second.messages.space == "acme"
        assert generation.read_state(storage).space_name == "acme"
        assert any("'other'" in r.getMessage() and "'acme'" in r.getMessage()
                   for r in caplog.records)

    asyncio.run(go())


def test_a_named_restart_writes_no_row_for_the_name_it_stored_already() -> None:
    async def go() -> None:
        storage = SqliteStorage(":memory:")
        app: Any = build_app()
        clock = ManualClock(START)
        await Space(app, storage, clock=clock, name="acme").start()
        costs = []
        for name in ("acme", None):
            before = storage.meter.reading()
            await Space(app, storage, clock=clock, name=name).start()
            costs.append(storage.meter.reading() - before)
        named, unnamed = costs
        assert named.rows_written == unnamed.rows_written
        assert named.rows_read == unnamed.rows_read

    asyncio.run(go())
