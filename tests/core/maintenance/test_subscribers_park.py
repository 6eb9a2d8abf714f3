"""A delivery refused for good (DeliveryRefused) parks its subscriber: the detail is kept and
shown in ``/maintenance``, the parking is logged once, nothing more is delivered to it and no
alarm is kept armed for it, until a deploy bumps its version."""

from __future__ import annotations

import asyncio
import logging

import pytest
from subscribers_support import clock, emit, log_end, maintenance_view, row, writer_app

from threadline import Application, DeliveryRefused, Record
from threadline.testing import SimulatedObject


def _app(version: int, calls: list[list[Record]], *, refuse: bool) -> Application:
    app = writer_app()

    @app.subscriber("crm", version=version)
    async def crm(batch: list[Record]) -> None:
        calls.append(batch)
        if refuse:
            raise DeliveryRefused("crm refused the batch", detail="HTTP 400: unknown field")

    return app


def _parked(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is parked" in r.getMessage()]


async def _park(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[list[Record]] = []
    async with SimulatedObject(_app(1, calls, refuse=True), clock=clock(),
                               check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        stored = row(obj, "crm")
        assert stored is not None and stored.parked and stored.cursor == 0
        assert stored.detail == "HTTP 400: unknown field"
        assert stored.error == "crm refused the batch"
        # What parked it, and when: one failure, its type, the time the batch was refused.
        assert (stored.failures, stored.error_type) == (1, "DeliveryRefused")
        assert stored.failed_at == obj.clock.now_ms() and stored.retry_at is None
        assert len(calls) == 1
        assert _parked(caplog) == [
            "threadline: subscriber 'crm' is parked: its destination refused a batch "
            "(crm refused the batch); resume, skip or restart it (the operator's subscriber "
            "routes), or bump its version"]
        view = {item["name"]: item for item in (await maintenance_view(obj))["subscribers"]}
        assert view["crm"]["state"] == "parked"
        assert view["crm"]["detail"] == "HTTP 400: unknown field"
        # The log ends at the submission's settlement record, after its emitted record.
        assert view["crm"]["cursor"] == 0 and view["crm"]["log_end"] == log_end(obj) == 2
        # Parked: more records reach nobody, the alarm is not kept for it, nothing is logged
        # again (not even by a new incarnation).
        emit(obj, "t", ("note", 2))
        await obj.run_alarms()
        await obj.evict()
        await obj.run_alarms()
        assert len(calls) == 1 and obj.alarm_at is None
        assert len(_parked(caplog)) == 1
        # A deploy that bumps the version delivers the log again, from its beginning.
        await obj.redeploy(_app(2, calls, refuse=False))
        await obj.run_alarms()
        # Both submissions' records and settlement records.
        assert [record.seq for record in calls[-1]] == [1, 2, 3, 4]
        again = row(obj, "crm")
        assert again is not None and not again.parked and again.cursor == log_end(obj) == 4
        assert again.detail is None and again.version == 2


def test_a_refused_batch_parks_the_subscriber_and_shows_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.maintenance")
    asyncio.run(_park(caplog))
