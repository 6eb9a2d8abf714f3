"""Webhook and queue subscribers driven by the maintenance pass of a simulated object: what
each answer does to the subscriber, as /maintenance shows it."""

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
from threadline.delivery.outbound import OutboundResponse
from threadline.threads.records import SUBMISSION_SETTLED

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "maintenance"))
from subscribers_support import clock, emit, log_end, maintenance_view, row, writer_app

from threadline.testing import SimulatedObject

URL = "https://crm.example.com/hooks/threadline"
SECRET = "whsec_pass_secret"


def _webhook_app() -> threadline.Application:
    app = writer_app()
    app.webhook("crm", url=URL, secret_env="CRM_SECRET", kinds={"note"})
    return app


def _records(sent: Sent) -> list[int]:
    return [record["seq"] for record in json.loads(sent.body)["records"]]


async def _park_on_404(caplog: pytest.LogCaptureFixture) -> None:
    http = FakeHttp(OutboundResponse(404, body=b'{"error":"no such hook"}'))
    async with SimulatedObject(_webhook_app(), clock=clock(), env={"CRM_SECRET": SECRET},
                               http=http, check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1), ("note", 2))
        await obj.run_alarms()
        stored = row(obj, "crm")
        assert stored is not None and stored.parked and stored.cursor == 0
        view = {item["name"]: item for item in (await maintenance_view(obj))["subscribers"]}
        assert view["crm"]["state"] == "parked"
        assert view["crm"]["detail"] == 'HTTP 404: {"error":"no such hook"}'
        shown = json.dumps(await maintenance_view(obj)) + caplog.text
        assert SECRET not in shown
        assert len(http.sent) == 1 and obj.alarm_at is None


def test_a_webhook_answering_404_parks_with_the_answer_in_maintenance(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    asyncio.run(_park_on_404(caplog))


async def _retry_then_deliver() -> None:
    answers = iter([OutboundResponse(503, body=b"later"), OutboundResponse(200)])
    http = FakeHttp(lambda _: next(answers))
    async with SimulatedObject(_webhook_app(), clock=clock(), env={"CRM_SECRET": SECRET},
                               http=http, check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1), ("other", 2), ("note", 3))
        for _ in range(20):  # a few ms at a time: the retry waits a backoff of seconds
            if http.sent:
                break
            await obj.run_alarms(until=obj.clock.now_ms() + 50)
        failed = row(obj, "crm")
        assert failed is not None and not failed.parked and failed.cursor == 0
        assert failed.error is not None and "HTTP 503: later" in failed.error
        await obj.run_alarms(until=obj.clock.now_ms() + 3_600_000)
        first, again = http.sent
        assert _records(first) == _records(again) == [1, 3]
        # The same batch again: the same key, a fresh signature.
        assert first.headers["idempotency-key"] == again.headers["idempotency-key"]
        signed = again.headers["threadline-signature"]
        assert signed != first.headers["threadline-signature"]
        sent_at = int(signed.split(",")[0].removeprefix("t="))
        assert threadline.verify_signature(again.body, signed, SECRET, now=sent_at) == sent_at
        # The cursor passed the settlement record too, which its kinds keep from the hook.
        delivered = row(obj, "crm")
        assert delivered is not None and delivered.error is None
        assert delivered.cursor == log_end(obj) == 4


def test_a_webhook_answering_503_is_retried_with_the_same_idempotency_key() -> None:
    asyncio.run(_retry_then_deliver())


async def _missing_secret() -> None:
    http = FakeHttp()
    async with SimulatedObject(_webhook_app(), clock=clock(), env={}, http=http) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        view = {item["name"]: item for item in (await maintenance_view(obj))["subscribers"]}
        assert view["crm"]["state"] == "parked"
        assert "CRM_SECRET is not set" in view["crm"]["error"]
        assert http.sent == []


def test_a_webhook_without_its_secret_parks_naming_the_variable() -> None:
    asyncio.run(_missing_secret())


async def _queue(env: Any) -> list[list[Any]]:
    app = writer_app()
    app.queue("audit", binding="EVENTS", batch=2)
    async with SimulatedObject(app, clock=clock(), env=env, space="acme",
                               check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1), ("note", 2), ("note", 3))
        await obj.run_alarms()
        stored = row(obj, "audit")
        assert stored is not None and stored.cursor == log_end(obj) == 4
    return env["EVENTS"].calls  # type: ignore[no-any-return]


def test_a_queue_subscriber_sends_every_record_through_the_binding() -> None:
    calls = asyncio.run(_queue({"EVENTS": FakeQueue()}))
    # Every record: the three emitted and the submission's settlement after them.
    assert [[body["record"]["seq"] for body in call] for call in calls] == [[1, 2], [3, 4]]
    kinds = [body["record"]["kind"] for call in calls for body in call]
    assert kinds == ["note", "note", "note", SUBMISSION_SETTLED]
    assert {body["space"] for call in calls for body in call} == {"acme"}
