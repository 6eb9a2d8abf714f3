"""A subscriber a deploy removed stops: its cursor row is dropped at start-up with one log
line. A start whose declarations did not change reads no subscriber row at all."""

from __future__ import annotations

import asyncio
import logging

import pytest
from subscribers_support import Recorder, clock, emit, row, writer_app

from threadline import Application, Space
from threadline.testing import SimulatedObject


def _app(*names: str, got: Recorder | None = None) -> Application:
    app = writer_app()
    for name in names:
        app.subscriber(name)(got if got is not None else Recorder())
    return app


def _dropped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not declared" in r.getMessage()]


async def _removed(caplog: pytest.LogCaptureFixture) -> None:
    gone = Recorder()
    async with SimulatedObject(_app("keep", "gone", got=gone), clock=clock(),
                               check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        # The record and its submission's settlement, to each of the two (one Recorder here).
        assert len(gone.records) == 4
        await obj.redeploy(_app("keep"))
        assert _dropped(caplog) == [
            "threadline: subscriber 'gone' is not declared in this deployment; its cursor "
            "(at 2, 1 batches delivered) is dropped"]
        assert row(obj, "gone") is None and row(obj, "keep") is not None
        emit(obj, "t", ("note", 2))
        await obj.run_alarms()
        await obj.evict()
        assert len(_dropped(caplog)) == 1


def test_a_removed_subscriber_is_dropped_at_start_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.maintenance")
    asyncio.run(_removed(caplog))


async def _cold_start_rows(subscribers: int) -> int:
    names = [f"s{n}" for n in range(subscribers)]
    async with SimulatedObject(_app(*names), clock=clock()) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        await obj.evict()
        # A later cold start of the same deployment, over the same storage.
        before = obj.storage.meter.reading()
        await Space(obj.app, obj.storage, clock=obj.clock).start()
        return (obj.storage.meter.reading() - before).rows_read


def test_an_unchanged_start_reads_the_same_rows_with_one_subscriber_or_twenty() -> None:
    assert asyncio.run(_cold_start_rows(1)) == asyncio.run(_cold_start_rows(20))
