"""A required subscriber gates native work: a Thread's next head runs only once every required
subscriber has consumed that Thread's committed records. One whose destination refuses (or
fails) a Thread's records is parked (or backs off) on that Thread alone, and that is reported
once and shown in ``/maintenance`` with the work that waits."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from subscribers_support import CONFIG, clock, holds, maintenance_view, row

from threadline import Application, DeliveryRefused, Record, Turn
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState


def _app(events: list[tuple[str, Any]], *, refuse: bool, version: int = 1) -> Application:
    app = Application(CONFIG)

    @app.agent("writer")
    async def writer(turn: Turn) -> None:
        events.append(("ran", turn.input["name"]))
        for kind, body in turn.input["emit"]:
            await turn.emit(body, kind=kind)

    # The emitted records: each submission's settlement record would hold its Thread too.
    @app.subscriber("audit", kinds={"note"}, required=True, version=version)
    async def audit(batch: list[Record]) -> None:
        if refuse:
            raise DeliveryRefused("audit store refused", detail="HTTP 422")
        events.extend(("audited", (record.thread_id, record.seq)) for record in batch)

    return app


def _submit(obj: SimulatedObject, thread: str, name: str, *items: tuple[str, Any]) -> str:
    return obj.admit(thread, "writer", {"name": name, "emit": [list(i) for i in items]}).id


async def _drains_first() -> None:
    events: list[tuple[str, Any]] = []
    async with SimulatedObject(_app(events, refuse=False), clock=clock(),
                               check_alarm_invariant=True) as obj:
        _submit(obj, "a", "a1", ("note", 1), ("note", 2))
        _submit(obj, "a", "a2", ("note", 3))
        _submit(obj, "a", "a3")
        await obj.run_alarms()
        # Each head ran only after the records of the one before it were consumed.
        # (a1's settlement record is seq 3, a2's record seq 4.)
        assert events == [
            ("ran", "a1"), ("audited", ("a", 1)), ("audited", ("a", 2)),
            ("ran", "a2"), ("audited", ("a", 4)), ("ran", "a3"),
        ]


def test_a_threads_next_work_waits_until_required_subscribers_consumed_its_records() -> None:
    asyncio.run(_drains_first())


async def _parked_blocks_only_what_must_wait(caplog: pytest.LogCaptureFixture) -> None:
    events: list[tuple[str, Any]] = []
    async with SimulatedObject(_app(events, refuse=True), clock=clock(),
                               check_alarm_invariant=True) as obj:
        _submit(obj, "a", "a1", ("note", 1))
        _submit(obj, "b", "b1")
        await obj.run_alarms()
        stored = row(obj, "audit")
        assert stored is not None and not stored.parked
        assert [(hold.thread_id, hold.parked) for hold in holds(obj, "audit").values()] == [
            ("a", True)]
        held = _submit(obj, "a", "a2", ("note", 2))
        free = _submit(obj, "b", "b2")
        await obj.run_alarms()
        # b has no record the subscriber lacks: its work goes on. a's waits, no alarm kept.
        assert obj.submission(free).state is SubmissionState.SETTLED
        assert obj.submission(held).state is SubmissionState.QUEUED
        assert obj.alarm_at is None
        assert [name for kind, name in events if kind == "ran"] == ["a1", "b1", "b2"]
        lines = [r.getMessage() for r in caplog.records if "is parked" in r.getMessage()]
        assert lines == [
            "threadline: subscriber 'audit' is parked on thread 'a': its destination refused a "
            "batch (audit store refused); native work of that thread waits for it, the other "
            "threads' records go on; resume, skip or restart it (the operator's subscriber "
            "routes), or bump its version"]
        view = {item["name"]: item for item in (await maintenance_view(obj))["subscribers"]}
        assert view["audit"]["state"] == "parked" and view["audit"]["required"] is True
        assert [(item["thread"], item["state"], item["detail"])
                for item in view["audit"]["held_threads"]] == [("a", "parked", "HTTP 422")]
        assert view["audit"]["waiting_threads"] == ["a"]
        assert view["audit"]["waiting_submissions"] == [held]
        # A deploy that bumps its version delivers a's records, then a's work goes on.
        since = len(events)
        await obj.redeploy(_app(events, refuse=False, version=2))
        await obj.run_alarms()
        assert obj.submission(held).state is SubmissionState.SETTLED
        assert holds(obj, "audit") == {}
        # a2's record follows a1's settlement record: seq 3.
        assert events[since:] == [("audited", ("a", 1)), ("ran", "a2"), ("audited", ("a", 3))]
        assert obj.alarm_at is None


def test_a_parked_required_subscriber_blocks_only_its_threads_and_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="threadline.maintenance")
    asyncio.run(_parked_blocks_only_what_must_wait(caplog))


async def _backing_off() -> None:
    events: list[tuple[str, Any]] = []
    failures = [RuntimeError("down"), RuntimeError("down")]
    app = Application(CONFIG)

    @app.agent("writer")
    async def writer(turn: Turn) -> None:
        events.append(("ran", turn.input["name"]))
        for kind, body in turn.input["emit"]:
            await turn.emit(body, kind=kind)

    @app.subscriber("audit", kinds={"note"}, required=True)
    async def audit(batch: list[Record]) -> None:
        if failures:
            raise failures.pop()
        events.extend(("audited", (record.thread_id, record.seq)) for record in batch)

    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        _submit(obj, "a", "a1", ("note", 1))
        held = _submit(obj, "a", "a2")
        free = _submit(obj, "b", "b1")
        await obj.run_alarms()
        # a2 waited out the subscriber's two backoffs; b1 never waited.
        assert events == [("ran", "a1"), ("ran", "b1"), ("audited", ("a", 1)), ("ran", "a2")]
        assert obj.submission(held).state is SubmissionState.SETTLED
        assert obj.submission(free).state is SubmissionState.SETTLED
        # Its batch was read when the log held a1's record and a1's and b1's settlement
        # records; a2's settlement came after, stepped over in memory only.
        pos = {str(r["record_id"]): int(r["pos"])
               for r in obj.storage.exec("SELECT record_id, pos FROM tl_history")}
        stored = row(obj, "audit")
        assert stored is not None and stored.failures == 0
        assert stored.cursor == pos[f"{held}:settled"] - 1 == 3


def test_a_backing_off_required_subscriber_holds_its_threads_until_it_delivers() -> None:
    asyncio.run(_backing_off())
