"""Operators and clients see the schedules: ``GET .../maintenance`` lists each schedule (id,
expression or interval, time zone, next fire, last fire, last error, state) and each host lane;
``GET .../schedules`` and ``Client.schedules(space)`` read the schedules alone; the OpenAPI
document covers every new field, and real responses match it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import jsonschema
from api_support import Api, run
from test_client import BASE, TOKEN, _answer, _client

from threadline import Application, LaneContext, ManualClock, RuntimeConfig, ScheduleContext
from threadline.api.router import Router
from threadline.api.routes import ROUTES
from threadline.client import AsyncClient

FIVE = 300_000


def _app() -> Application:
    app = Application(RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=60_000))

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        return turn.input

    @app.every(timedelta(minutes=5), id="pulse")
    async def pulse(ctx: ScheduleContext) -> None:
        await ctx.submit("pulse", ctx.fire_time.isoformat())

    @app.every(timedelta(minutes=5), id="flaky", dispatch_timeout=timedelta(seconds=10))
    async def flaky(ctx: ScheduleContext) -> None:
        raise LookupError("no such account")

    @app.cron("0 9 * * MON-FRI", tz="Europe/Paris", id="digest")
    async def digest(ctx: ScheduleContext) -> None:
        return None

    @app.lane("mirror", phase="after-native", dispatch_timeout=timedelta(seconds=20))
    async def mirror(ctx: LaneContext) -> None:
        return None

    return app


def _fired(clock: ManualClock) -> tuple[Api, int]:
    """An object whose every-five-minutes schedules fired once."""
    api = Api(_app(), clock)
    fire = (clock.now_ms() // FIVE + 1) * FIVE
    clock.set(fire)
    run(api.space.alarm())
    return api, fire


def test_the_maintenance_report_lists_each_schedule_and_each_host_lane(
    clock: ManualClock,
) -> None:
    api, fire = _fired(clock)
    body = api.call("GET", f"/v1/spaces/{api.space_id}/maintenance").json()
    schedules = {item["id"]: item for item in body["schedules"]}
    assert list(schedules) == ["digest", "flaky", "pulse"]
    assert schedules["pulse"] == {
        "id": "pulse", "kind": "every", "expression": None, "interval_ms": FIVE, "tz": None,
        "dispatch_timeout_ms": 30_000, "state": "scheduled", "next_fire": fire + FIVE,
        "due_at": fire + FIVE, "pending_fire": None, "failures": 0, "last_fire": fire,
        "last_ended_at": fire, "last_error": None,
    }
    flaky = schedules["flaky"]
    assert flaky["state"] == "retrying" and flaky["pending_fire"] == fire
    assert flaky["failures"] == 1 and flaky["last_fire"] is None
    assert flaky["next_fire"] == fire + FIVE and fire < flaky["due_at"] < fire + FIVE
    assert flaky["last_error"] == {"type": "LookupError", "message": "no such account",
                                   "at": fire, "fire": fire}
    digest = schedules["digest"]
    assert (digest["kind"], digest["expression"], digest["tz"], digest["interval_ms"]) == (
        "cron", "0 9 * * MON-FRI", "Europe/Paris", None)
    assert digest["state"] == "scheduled" and digest["last_fire"] is None
    assert body["host_lanes"] == [{"id": "mirror", "phase": "after-native",
                                   "dispatch_timeout_ms": 20_000, "state": "idle",
                                   "due_at": None, "stalls": 0}]


def test_the_schedules_route_and_both_clients_read_the_schedules(clock: ManualClock) -> None:
    api, fire = _fired(clock)
    listed = api.call("GET", f"/v1/spaces/{api.space_id}/schedules").json()
    report = api.call("GET", f"/v1/spaces/{api.space_id}/maintenance").json()
    assert listed == {"schedules": report["schedules"]}
    with _client(api) as client:
        seen = client.schedules(api.space_id)
    assert [item.id for item in seen] == ["digest", "flaky", "pulse"]
    assert seen[2].last_fire == fire and seen[1].last_error is not None
    assert seen[1].last_error.type == "LookupError"

    async def read() -> list[Any]:
        transport = httpx.MockTransport(lambda request: _answer(api, request))
        async with AsyncClient(BASE, TOKEN, transport=transport) as client:
            return await client.schedules(api.space_id)

    assert asyncio.run(read()) == seen


def test_the_openapi_document_covers_schedules_and_host_lanes(clock: ManualClock) -> None:
    api, _ = _fired(clock)
    document = api.call("GET", "/v1/openapi.json").json()
    schemas = document["components"]["schemas"]
    assert set(schemas["ScheduleView"]["properties"]) == {
        "id", "kind", "expression", "interval_ms", "tz", "dispatch_timeout_ms", "state",
        "next_fire", "due_at", "pending_fire", "failures", "last_fire", "last_ended_at",
        "last_error"}
    assert set(schemas["HostLaneView"]["properties"]) == {
        "id", "phase", "dispatch_timeout_ms", "state", "due_at", "stalls"}
    assert {"schedules", "host_lanes"} <= set(schemas["MaintenanceView"]["required"])
    operation = document["paths"]["/v1/spaces/{space}/schedules"]["get"]
    assert operation["operationId"] == "listSchedules"
    for path in (f"/v1/spaces/{api.space_id}/schedules",
                 f"/v1/spaces/{api.space_id}/maintenance"):
        response = api.call("GET", path)
        found = Router(ROUTES).resolve("GET", path)
        assert found.route is not None
        media = document["paths"][found.route.template]["get"]["responses"]["200"]["content"]
        schema = {**media["application/json"]["schema"], "components": document["components"]}
        jsonschema.Draft202012Validator(schema).validate(response.json())
