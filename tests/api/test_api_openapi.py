"""GET /v1/openapi.json: a valid OpenAPI 3.1 document that the real responses match."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from api_support import Api
from openapi_spec_validator import validate

from threadline.api.problems import PROBLEM_CONTENT_TYPE
from threadline.api.router import Router
from threadline.api.routes import ROUTES


def _document(api: Api) -> dict[str, Any]:
    response = api.call("GET", "/v1/openapi.json")
    assert response.status == 200
    return dict(response.json())


def test_the_document_is_valid_openapi_3_1(api: Api) -> None:
    document = _document(api)
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_every_route_is_documented_with_its_models(api: Api) -> None:
    document = _document(api)
    for route in ROUTES:
        operation = document["paths"][route.template][route.method.lower()]
        assert operation["operationId"] == route.operation_id
        assert set(operation["responses"]) >= {str(status) for status in route.responses}
        if route.body is not None:
            ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/" + route.body.__name__)
        if route.capability is None:
            assert operation["security"] == []
        else:
            assert operation["x-capability"] == route.capability.value
            expected = [{"bearer": []}, {"accessToken": []}] if route.query_token else None
            assert operation.get("security") == expected
    submit = document["paths"]["/v1/spaces/{space}/threads/{thread}/submissions"]["post"]
    assert "409" in submit["responses"] and "Location" in submit["responses"]["202"]["headers"]
    schema = document["components"]["schemas"]["SubmitRequest"]
    assert schema["required"] == ["input"] and schema["additionalProperties"] is False


def test_the_document_describes_the_bearer_and_the_query_token_schemes(api: Api) -> None:
    schemes = _document(api)["components"]["securitySchemes"]
    assert schemes["bearer"]["type"] == "http" and schemes["bearer"]["scheme"] == "bearer"
    assert schemes["accessToken"] == {**schemes["accessToken"], "type": "apiKey",
                                      "in": "query", "name": "access_token"}
    events = _document(api)["paths"]["/v1/spaces/{space}/threads/{thread}/events"]["get"]
    assert {"bearer": []} in events["security"] and {"accessToken": []} in events["security"]
    assert "403" in events["responses"]
    for status in ("429", "503"):
        assert "Retry-After" in events["responses"][status]["headers"]


def _check(document: dict[str, Any], method: str, path: str, status: int, body: Any,
           content_type: str) -> None:
    found = Router(ROUTES).resolve(method, path.split("?")[0])
    assert found.route is not None
    operation = document["paths"][found.route.template][method.lower()]
    assert str(status) in operation["responses"], (method, path, status)
    media = operation["responses"][str(status)]["content"]
    assert content_type in media
    schema = {**media[content_type]["schema"], "components": document["components"]}
    jsonschema.Draft202012Validator(schema).validate(body)


def test_real_responses_match_the_document(api: Api) -> None:
    document = _document(api)
    seen: list[tuple[str, str, int]] = []

    def call(method: str, path: str, body: Any = None) -> dict[str, Any]:
        kwargs = {} if body is None else {"json_body": body}
        response = api.call(method, path, **kwargs)
        _check(document, method, path, response.status, response.json(),
               response.headers["content-type"])
        seen.append((method, path, response.status))
        return dict(response.json())

    call("GET", "/v1/health")
    echo = call("POST", api.thread_path("t1") + "/submissions",
                {"agent": "echo", "input": {"text": "a"}, "idempotency_key": "k"})
    call("POST", api.thread_path("t1") + "/submissions",
         {"agent": "echo", "input": {"text": "a"}, "idempotency_key": "k"})
    confirm = call("POST", api.thread_path("t2") + "/submissions",
                   {"agent": "confirm", "input": {"text": "b"}})
    api.drive()
    call("GET", api.submission_path("t1", echo["id"]))
    call("GET", api.submission_path("t2", confirm["id"]))
    call("POST", api.submission_path("t2", confirm["id"]) + "/approvals/confirm",
         {"approved": True, "payload": [1, 2]})
    queued = call("POST", api.thread_path("t1") + "/submissions", {"input": {"text": "c"}})
    call("POST", api.submission_path("t1", queued["id"]) + "/abort", {"reason": "r"})
    call("GET", f"/v1/spaces/{api.space_id}/threads?limit=1")
    call("GET", api.thread_path("t1"))
    call("GET", api.thread_path("t1") + "/history?limit=1")
    call("GET", api.thread_path("unsubmitted"))
    call("GET", api.thread_path("unsubmitted") + "/history")
    call("GET", f"/v1/spaces/{api.space_id}/maintenance")
    # problems
    call("POST", api.thread_path("t1") + "/submissions", {"input": 1, "agent": "nope"})
    call("POST", api.thread_path("t1") + "/submissions",
         {"agent": "echo", "input": {"text": "z"}, "idempotency_key": "k"})
    call("GET", api.submission_path("t1", "sub_missing"))
    call("POST", api.submission_path("t1", queued["id"]) + "/resolve", {"action": "retry"})
    call("GET", api.thread_path("..") + "/history")
    statuses = {status for _, _, status in seen}
    assert statuses == {200, 202, 400, 404, 409, 422}


@pytest.mark.parametrize("path", ["/v1/health", "/v1/openapi.json"])
def test_open_routes_declare_no_security(api: Api, path: str) -> None:
    operation = _document(api)["paths"][path]["get"]
    assert operation["security"] == []


def test_problem_responses_are_documented_as_problem_json(api: Api) -> None:
    document = _document(api)
    get_thread = document["paths"]["/v1/spaces/{space}/threads/{thread}"]["get"]
    for status in ("400", "401", "404", "503"):
        assert PROBLEM_CONTENT_TYPE in get_thread["responses"][status]["content"]


def test_a_thread_before_its_first_submission_is_documented_as_empty(api: Api) -> None:
    document = _document(api)
    schemas = document["components"]["schemas"]
    nullable = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    summary = schemas["ThreadSummary"]["properties"]
    for name in ("created_at", "updated_at"):
        assert {k: summary[name][k] for k in ("anyOf",)} == nullable
        # A listed Thread was written, so its timestamps are always there.
        assert schemas["ThreadItem"]["properties"][name]["type"] == "integer"
    thread = document["paths"]["/v1/spaces/{space}/threads/{thread}"]
    for operation in (thread["get"], document["paths"][
            "/v1/spaces/{space}/threads/{thread}/history"]["get"]):
        assert "once it is named" in operation["description"]
    events = document["paths"]["/v1/spaces/{space}/threads/{thread}/events"]["get"]
    assert "no submission yet" in events["description"]
