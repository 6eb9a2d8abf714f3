"""The OpenAPI document covers delayed submissions (``not_before`` as RFC 3339 or epoch ms, the
``scheduled`` state, the Thread's scheduled list) and the real responses match it; the Python
client submits with ``not_before`` as an aware datetime or epoch ms."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from api_support import Api
from test_api_openapi import _check, _document
from test_client import BASE, TOKEN, _answer

from threadline.client import Client
from threadline.errors import ValidationFailed

DUE = 1_700_000_000_000 + 90_000


def test_the_document_describes_not_before_and_the_scheduled_state(api: Api) -> None:
    document = _document(api)
    schemas = document["components"]["schemas"]
    forms = schemas["SubmitRequest"]["properties"]["not_before"]["anyOf"]
    assert {"type": "string", "format": "date-time"} in forms
    assert {"type": "integer", "minimum": 0, "maximum": 2**53 - 1} in forms
    view = schemas["SubmissionView"]["properties"]
    assert "scheduled" in view["state"]["enum"]
    assert {"type": "null"} in view["seq"]["anyOf"]
    assert "scheduled" in schemas["ThreadSummary"]["properties"]


def test_scheduled_responses_match_the_document(api: Api) -> None:
    document = _document(api)

    def call(method: str, path: str, body: Any = None) -> dict[str, Any]:
        kwargs = {} if body is None else {"json_body": body}
        response = api.call(method, path, **kwargs)
        _check(document, method, path, response.status, response.json(),
               response.headers["content-type"])
        return dict(response.json())

    sub = call("POST", api.thread_path("t1") + "/submissions",
               {"agent": "echo", "input": {"text": "a"}, "not_before": DUE,
                "idempotency_key": "k"})
    call("POST", api.thread_path("t1") + "/submissions",
         {"agent": "echo", "input": {"text": "a"}, "idempotency_key": "k"})
    call("GET", api.submission_path("t1", sub["id"]))
    call("GET", api.thread_path("t1"))
    call("POST", api.thread_path("t1") + "/submissions",
         {"agent": "echo", "input": {"text": "a"}, "not_before": "2030-01-01T09:00:00"})
    call("POST", api.submission_path("t1", sub["id"]) + "/abort", {})


def _client(api: Api) -> Client:
    transport = httpx.MockTransport(lambda request: asyncio.run(_answer(api, request)))
    return Client(BASE, TOKEN, transport=transport)


@pytest.mark.parametrize("not_before", [
    datetime(2023, 11, 14, 22, 14, 50, tzinfo=UTC),
    datetime(2023, 11, 15, 0, 14, 50, tzinfo=timezone(timedelta(hours=2))),
    DUE,
])
def test_the_client_submits_with_a_due_time(api: Api, not_before: datetime | int) -> None:
    with _client(api) as client:
        view = client.submit("acme", "t1", {"text": "x"}, agent="echo", not_before=not_before)
        assert (view.state, view.seq, view.not_before) == ("scheduled", None, DUE)
        assert client.get_submission("acme", "t1", view.id).state == "scheduled"
        assert [item.id for item in client.thread("acme", "t1").scheduled] == [view.id]


def test_the_client_refuses_a_naive_due_time_through_the_api(api: Api) -> None:
    with _client(api) as client, pytest.raises(ValidationFailed) as refused:
        client.submit("acme", "t1", {"text": "x"}, agent="echo",
                      not_before=datetime(2030, 1, 1, 9))
    assert refused.value.field == "not_before" and refused.value.status == 422
