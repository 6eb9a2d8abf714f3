"""What a failing subscriber leaves behind is exact and bounded: ``/maintenance`` says what
failed, when and why (error text at most 500 characters, a refusal's detail at most 2,000), the
log says when it is retried (after a backoff, or when its destination asked), a delivered batch
ends the failure streak, and a cursor or parking write that storage refuses loses nothing: the
batch is delivered again (at least once) and the subscriber backs off in memory."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from subscribers_support import (
    CONFIG,
    Recorder,
    clock,
    emit,
    log_end,
    maintenance_view,
    row,
    writer_app,
)

from threadline import Application, DeliveryRefused
from threadline.maintenance.subscriber_cursors import SKIP_PERSIST
from threadline.testing import SimulatedObject


class Throttled(Exception):
    """A destination's 429 with its Retry-After, as a webhook raises it."""

    def __init__(self, retry_after_ms: int) -> None:
        super().__init__("429 Too Many Requests")
        self.retry_after_ms = retry_after_ms


def _app(recorder: Recorder, **options: Any) -> Application:
    app = writer_app()
    app.subscriber("crm", **options)(recorder)
    return app


async def _view(obj: SimulatedObject, name: str) -> dict[str, Any]:
    return {item["name"]: item for item in (await maintenance_view(obj))["subscribers"]}[name]


async def _parked_readout() -> None:
    recorder = Recorder()
    recorder.fail = lambda batch: DeliveryRefused("x" * 5_000, detail="d" * 9_000)
    async with SimulatedObject(_app(recorder), clock=clock()) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        view = await _view(obj, "crm")
        stored = row(obj, "crm")
        assert stored is not None and stored.parked
        assert view["state"] == "parked" and view["failures"] == 1
        assert view["error_type"] == "DeliveryRefused"
        assert view["error"] == "x" * 500 and view["detail"] == "d" * 2_000
        assert view["failed_at"] == stored.failed_at is not None
        assert stored.failed_at <= obj.clock.now_ms()


def test_a_parked_subscriber_says_what_refused_it_when_and_why_within_bounds() -> None:
    asyncio.run(_parked_readout())


async def _failure_log(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    failures: list[BaseException] = [RuntimeError("y" * 900), Throttled(120_000)]
    recorder.fail = lambda batch: failures.pop(0) if failures else None
    async with SimulatedObject(_app(recorder), clock=clock()) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms(until=obj.alarm_at)  # the first handler alone
        view = await _view(obj, "crm")
        assert (view["state"], view["failures"]) == ("backing-off", 1)
        assert view["error_type"] == "RuntimeError" and view["error"] == "y" * 500
        assert view["failed_at"] is not None and view["retry_at"] > view["failed_at"]
        await obj.run_alarms()
        lines = [r.getMessage() for r in caplog.records if "failed to deliver" in r.getMessage()]
        assert lines == [
            "threadline: subscriber 'crm' failed to deliver a batch (RuntimeError); retried "
            "after a backoff",
            "threadline: subscriber 'crm' failed to deliver a batch (Throttled); retried in "
            "120000 ms, as its destination asked",
        ]
        assert [r.seq for r in recorder.records] == [1, 2]


def test_a_failed_delivery_is_shown_and_logged_with_when_it_is_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.maintenance")
    asyncio.run(_failure_log(caplog))


async def _streak_ends() -> None:
    recorder = Recorder()
    plan: list[bool] = [True, True, True, False, True]
    recorder.fail = lambda batch: RuntimeError("down") if plan.pop(0) else None
    async with SimulatedObject(_app(recorder), clock=clock()) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()  # three failures, then delivered
        assert [r.seq for r in recorder.records] == [1, 2]
        emit(obj, "t", ("note", 2))
        await obj.run_alarms(until=obj.alarm_at)  # the first handler alone
        failed = row(obj, "crm")
        assert failed is not None and failed.failures == 1 and failed.retry_at is not None
        assert failed.failed_at is not None
        # The streak started over: the first failure's backoff, base jittered over [b/2, b].
        base = CONFIG.alarm_backoff_base_ms
        assert base // 2 <= failed.retry_at - failed.failed_at <= base


def test_a_delivered_batch_ends_the_failure_streak() -> None:
    asyncio.run(_streak_ends())


async def _cursor_write_refused() -> None:
    recorder = Recorder()
    async with SimulatedObject(_app(recorder), clock=clock(), check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1))
        obj.fail_statements("UPDATE tl_subscribers SET cursor = ?, failures = 0")
        await obj.run_alarms()
        # Delivered, not recorded: delivered again (at least once), then the cursor moved.
        assert [r.seq for r in recorder.records] == [1, 2, 1, 2]
        stored = row(obj, "crm")
        assert stored is not None and stored.cursor == log_end(obj) and stored.failures == 0
        assert obj.alarm_at is None


def test_a_cursor_write_storage_refuses_delivers_the_batch_again() -> None:
    asyncio.run(_cursor_write_refused())


async def _park_write_refused() -> None:
    recorder = Recorder()
    recorder.fail = lambda batch: DeliveryRefused("no", detail="HTTP 400")
    async with SimulatedObject(_app(recorder), clock=clock()) as obj:
        emit(obj, "t", ("note", 1))
        obj.fail_statements("UPDATE tl_subscribers SET state = 'parked'")
        obj.fail_statements("UPDATE tl_subscribers SET failures = failures + 1", times=5)
        await obj.run_alarms(until=obj.alarm_at)  # the first handler alone
        # Neither the parking nor the backoff could be written: it backs off in memory.
        stored = row(obj, "crm")
        assert stored is not None and not stored.parked and stored.failures == 0
        assert obj.alarm_at is not None and obj.alarm_at > obj.clock.now_ms()
        await obj.run_alarms()
        parked = row(obj, "crm")
        assert parked is not None and parked.parked  # once storage answered again


def test_a_parking_storage_refuses_backs_the_subscriber_off_in_memory() -> None:
    asyncio.run(_park_write_refused())


async def _skip_persisted() -> None:
    recorder = Recorder()
    app = _app(recorder, kinds={"rare"})
    async with SimulatedObject(app, clock=clock()) as obj:
        emit(obj, "t", *[("note", n) for n in range(SKIP_PERSIST + 10)])
        await obj.run_alarms()
        stored = row(obj, "crm")
        assert recorder.records == []
        # Stepped over in memory, then written once SKIP_PERSIST records were: a restart does
        # not read them again. No batch was delivered.
        assert stored is not None and stored.delivered == 0
        assert SKIP_PERSIST <= stored.cursor <= log_end(obj)
        view = await _view(obj, "crm")
        assert view["delivered"] == 0


def test_records_a_subscriber_does_not_want_are_stepped_over_and_written_in_bulk() -> None:
    asyncio.run(_skip_persisted())


async def _restart_past_memory() -> None:
    from test_subscribers_operator_recovery import _post

    recorder = Recorder()
    app = _app(recorder, kinds={"note"})
    async with SimulatedObject(app, clock=clock(), space="acme") as obj:
        emit(obj, "t", ("note", 1), ("other", 2), ("other", 3))
        await obj.run_alarms()
        assert [r.seq for r in recorder.records] == [1]
        # The records past its last batch were stepped over in memory only.
        status, answer = await _post(obj, "/subscribers/crm/restart", {"position": 0})
        assert status == 200, answer
        await obj.run_alarms()
        assert [r.seq for r in recorder.records] == [1, 1]


def test_a_restart_replays_from_its_position_whatever_was_stepped_over_in_memory() -> None:
    asyncio.run(_restart_past_memory())


async def _second_subscriber_retried() -> None:
    parked, later = Recorder(), Recorder()
    parked.fail = lambda batch: DeliveryRefused("no")
    attempts = [RuntimeError("down")]
    later.fail = lambda batch: attempts.pop() if attempts else None
    app = writer_app()
    app.subscriber("a_parked")(parked)
    app.subscriber("b_later")(later)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        # One subscriber parked does not keep the publication lane from another's retry.
        assert [r.seq for r in later.records] == [1, 2]
        assert obj.alarm_at is None


def test_a_parked_subscriber_does_not_hide_another_ones_retry() -> None:
    asyncio.run(_second_subscriber_retried())
