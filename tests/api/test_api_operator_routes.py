"""The operator routes over HTTP: only `admin` opens them, the blocking and asynchronous clients
drive each, and their answers match the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from operator_support import OPERATOR, Stuck

from threadline import Conflict, NotFound, ValidationFailed
from threadline.api.router import Router
from threadline.api.routes import ROUTES
from threadline.client import AsyncClient, Client
from threadline.threads.records import SUBSCRIBER_SKIPPED

ACTIONS: list[tuple[str, Any]] = [
    ("/v1/spaces/acme/subscribers/crm/resume", None),
    ("/v1/spaces/acme/subscribers/audit/skip", {"cursor": 2}),
    ("/v1/spaces/acme/subscribers/audit/restart", {"position": 0}),
    ("/v1/spaces/acme/lanes/poll/retry", None),
]


@pytest.fixture
def stuck() -> Iterator[Stuck]:
    space = Stuck()
    yield space
    space.close()


def _views(client: Client) -> dict[str, Any]:
    return {item.name: item for item in client.maintenance("acme").subscribers}


def test_an_oversized_record_parks_the_queue_subscriber_as_the_clients_maintenance_shows(
    stuck: Stuck,
) -> None:
    with Client("http://threadline.test", stuck.token(), transport=stuck.transport()) as client:
        views = _views(client)
        assert views["audit"].state == "parked" and views["audit"].cursor == 2
        assert views["crm"].state == "parked" and views["crm"].cursor == 0
        lanes = {lane.id: lane.state for lane in client.maintenance("acme").lanes}
        assert lanes["poll"] == "parked"
    assert stuck.queue.sent() == [(1, "note"), (2, "submission.settled")]


def test_a_token_without_admin_gets_403_from_each_operator_route_and_writes_nothing(
    stuck: Stuck,
) -> None:
    token = stuck.token("read", "submit", "decide", "abort")
    before = stuck.dump()
    for path, body in ACTIONS:
        response = stuck.call("POST", path, body, token=token)
        assert response.status == 403, path
    assert stuck.dump() == before


def test_the_blocking_client_skips_resumes_restarts_and_retries(stuck: Stuck) -> None:
    stuck.crm_fixed = stuck.poll_fixed = True
    token = stuck.token("admin", "read")
    with Client("http://threadline.test", token, transport=stuck.transport()) as client:
        with pytest.raises(Conflict) as stale:
            client.skip_record("acme", "audit", cursor=1)
        assert stale.value.extra["problem"]["current"] == 2
        skipped = client.skip_record("acme", "audit", cursor=2, record_id=_record_at(stuck, 3))
        assert (skipped.skipped.seq, skipped.skipped.position) == (3, 3)
        assert skipped.subscriber.state == "delivering"
        assert client.resume_subscriber("acme", "crm").failures == 0
        with pytest.raises(Conflict):
            client.resume_subscriber("acme", "crm")
        assert client.retry_lane("acme", "poll").state == "due"
        with pytest.raises(NotFound):
            client.retry_lane("acme", "nope")
        stuck.settle()
        assert stuck.queue.sent()[2:] == [(4, "submission.settled"), (5, "note"),
                                          (6, "submission.settled"), (7, SUBSCRIBER_SKIPPED)]
        assert [record.seq for record in stuck.crm] == [1, 2, 3, 4, 5, 6, 7]
        page = client.history("acme", "t1", after=6)
        assert page.records[0].kind == SUBSCRIBER_SKIPPED
        assert isinstance(page.records[0].body, dict)
        assert page.records[0].body["skipped_by"] == OPERATOR
        with pytest.raises(ValidationFailed) as refused:
            client.restart_subscriber("acme", "audit", position=8)
        assert refused.value.field == "position"
        assert client.restart_subscriber("acme", "audit", position=0).cursor == 0
        stuck.settle()
        # The log again from its beginning, up to the oversized record, on which it parks
        # again: a restart replays what a skip stepped over.
        again = _views(client)["audit"]
        assert (again.state, again.cursor) == ("parked", 2)
    assert stuck.queue.sent()[6:] == [(1, "note"), (2, "submission.settled")]


def _record_at(stuck: Stuck, seq: int) -> str:
    row = stuck.obj.storage.exec(
        "SELECT record_id FROM tl_history WHERE thread_id = 't1' AND seq = ?", seq).one()
    return str(row["record_id"])


async def _async_flow(stuck: Stuck) -> None:
    async with AsyncClient("http://threadline.test", stuck.token(),
                           transport=stuck.async_transport()) as client:
        report = await client.maintenance("acme")
        audit = next(item for item in report.subscribers if item.name == "audit")
        skipped = await client.skip_record("acme", "audit", cursor=audit.cursor)
        assert skipped.skipped.seq == 3
        assert (await client.resume_subscriber("acme", "crm")).state == "delivering"
        assert (await client.restart_subscriber("acme", "crm", position=4)).cursor == 4
        assert (await client.retry_lane("acme", "poll")).stalls == 0


def test_the_async_client_skips_resumes_restarts_and_retries(stuck: Stuck) -> None:
    asyncio.run(_async_flow(stuck))


def test_operator_answers_match_the_openapi_document(stuck: Stuck) -> None:
    token = stuck.token()
    document = json.loads(stuck.call("GET", "/v1/openapi.json", token=token).body)
    seen: set[int] = set()
    attempts = [
        *ACTIONS,
        ("/v1/spaces/acme/subscribers/crm/resume", None),  # no longer parked: 409
        ("/v1/spaces/acme/subscribers/audit/skip", {"cursor": 2}),  # stale now: 409
        ("/v1/spaces/acme/subscribers/audit/restart", {"position": -1}),  # 422
        ("/v1/spaces/acme/subscribers/nope/resume", None),  # 404
        ("/v1/spaces/acme/lanes/poll/retry", None),  # no longer parked: 409
    ]
    for path, body in attempts:
        response = stuck.call("POST", path, body, token=token)
        found = Router(ROUTES).resolve("POST", path)
        assert found.route is not None and found.route.capability is not None
        assert found.route.capability.value == "admin"
        operation = document["paths"][found.route.template]["post"]
        media = operation["responses"][str(response.status)]["content"]
        content_type = response.headers["content-type"]
        schema = {**media[content_type]["schema"], "components": document["components"]}
        jsonschema.Draft202012Validator(schema).validate(response.json())
        seen.add(response.status)
    assert seen == {200, 404, 409, 422}
