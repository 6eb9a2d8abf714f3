"""A webhook parked because its secret was not set resumes once the secret is there, at the
next start, from its cursor (not from the beginning, which only a version bump asks for); a
queue parked for a missing binding resumes the same way. Until the start, and at a start
where the environment still lacks it, it stays parked."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from destination_support import FakeHttp, FakeQueue, Sent

import threadline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "maintenance"))
from subscribers_support import clock, emit, log_end, row, writer_app

from threadline.maintenance.required_gate import read_holds
from threadline.testing import SimulatedObject

URL = "https://crm.example.com/hooks/threadline"
SECRET = "whsec_set_later"


def _seqs(sent: list[Sent]) -> list[int]:
    return [record["seq"] for request in sent for record in json.loads(request.body)["records"]]


def _app(*, required: bool = False) -> threadline.Application:
    app = writer_app()
    app.webhook("crm", url=URL, secret_env="CRM_SECRET", kinds={"note"}, required=required)
    return app


async def _secret_set_after_the_parking(caplog: pytest.LogCaptureFixture) -> None:
    http = FakeHttp()
    env: dict[str, Any] = {"CRM_SECRET": SECRET}
    async with SimulatedObject(_app(), clock=clock(), env=env, http=http,
                               check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1), ("note", 2))
        await obj.run_alarms()
        assert _seqs(http.sent) == [1, 2]
        delivered = row(obj, "crm")
        assert delivered is not None and not delivered.parked
        cursor = delivered.cursor

        del env["CRM_SECRET"]  # the secret is removed (rotated badly)
        emit(obj, "t", ("note", 3))
        await obj.run_alarms()
        parked = row(obj, "crm")
        assert parked is not None and parked.parked and parked.cursor == cursor
        assert parked.detail == "missing secret CRM_SECRET"

        await obj.evict()  # a start with the secret still missing: still parked
        await obj.run_alarms()
        still = row(obj, "crm")
        assert still is not None and still.parked and len(http.sent) == 1

        env["CRM_SECRET"] = SECRET
        await obj.run_alarms()  # set, yet no start since: nothing changes before one
        before_start = row(obj, "crm")
        assert before_start is not None and before_start.parked and len(http.sent) == 1

        await obj.evict()  # `wrangler secret put` deploys: the object starts again
        await obj.run_alarms()
        resumed = row(obj, "crm")
        assert resumed is not None and not resumed.parked and resumed.error is None
        assert resumed.cursor >= log_end(obj, "note")
        # From its cursor: the records it had are not sent again (the second submission's
        # note is seq 4, after the first one's settlement).
        assert _seqs(http.sent) == [1, 2, 4]
        assert "'crm' resumes from its cursor" in caplog.text
        assert SECRET not in caplog.text


def test_a_webhook_parked_for_a_missing_secret_resumes_from_its_cursor_at_the_next_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    asyncio.run(_secret_set_after_the_parking(caplog))


async def _required_hold_released() -> None:
    http = FakeHttp()
    env: dict[str, Any] = {}
    async with SimulatedObject(_app(required=True), clock=clock(), env=env, http=http,
                               check_alarm_invariant=True) as obj:
        first = emit(obj, "t", ("note", 1))
        second = emit(obj, "t", ("note", 2))
        await obj.run_alarms()
        # A required subscriber parks on the Thread it failed on, not as a whole.
        [hold] = read_holds(obj.storage)["crm"].values()
        assert hold.parked and hold.thread_id == "t"
        assert obj.submission(second).state.value == "queued"  # held by the gate
        env["CRM_SECRET"] = SECRET
        await obj.evict()
        await obj.run_alarms()
        assert "crm" not in read_holds(obj.storage)
        assert obj.submission(first).state.value == "settled"
        assert obj.submission(second).state.value == "settled"
        assert _seqs(http.sent) == [1, 3]  # each submission's note (its settlement is seq 2)


def test_a_required_webhook_resumed_at_start_releases_the_work_it_held() -> None:
    asyncio.run(_required_hold_released())


async def _binding_added_after_the_parking() -> None:
    env: dict[str, Any] = {}
    app = writer_app()
    app.queue("audit", binding="EVENTS", kinds={"note"})
    async with SimulatedObject(app, clock=clock(), env=env, check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        parked = row(obj, "audit")
        assert parked is not None and parked.parked
        assert parked.detail == "missing Queue binding EVENTS"
        queue = FakeQueue()
        env["EVENTS"] = queue
        await obj.evict()
        await obj.run_alarms()
        resumed = row(obj, "audit")
        assert resumed is not None and not resumed.parked
        assert [[body["record"]["seq"] for body in call] for call in queue.calls] == [[1]]


def test_a_queue_parked_for_a_missing_binding_resumes_at_the_next_start() -> None:
    asyncio.run(_binding_added_after_the_parking())


async def _refused_parking_stays() -> None:
    from threadline.delivery.outbound import OutboundResponse

    http = FakeHttp(OutboundResponse(410))
    async with SimulatedObject(_app(), clock=clock(), env={"CRM_SECRET": SECRET},
                               http=http) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        await obj.evict()
        await obj.run_alarms()
        parked = row(obj, "crm")
        assert parked is not None and parked.parked and len(http.sent) == 1


def test_a_webhook_parked_by_its_receiver_stays_parked_across_a_start() -> None:
    asyncio.run(_refused_parking_stays())
