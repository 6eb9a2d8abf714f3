"""The submission detail lists the errors of its failed Attempts, as the OpenAPI document and
the Python client's model describe them."""

from __future__ import annotations

from typing import Any

import jsonschema
from api_support import Api, make_api, run

from threadline import Application, ManualClock, NonRetryable, Turn
from threadline.api.models import SubmissionDetail


def _with_failing(app: Application) -> None:
    @app.agent("failing")
    async def failing(turn: Turn) -> Any:
        if turn.attempt == 1:
            raise TimeoutError("the provider did not answer")
        raise NonRetryable("the provider refused the request")


def _detail(api: Api, sub: str) -> dict[str, Any]:
    response = api.call("GET", api.submission_path("t1", sub))
    assert response.status == 200
    return dict(response.json())


def test_the_detail_lists_each_failed_attempt_as_the_document_describes(
    clock: ManualClock,
) -> None:
    api = make_api(clock, _with_failing)
    sub = str(api.submit("t1", None, agent="failing").json()["id"])
    assert _detail(api, sub)["failures"] == {"total": 0, "dropped": 0, "attempts": []}
    api.drive()
    waiting = _detail(api, sub)
    assert waiting["state"] == "ready"
    [first] = waiting["failures"]["attempts"]
    assert first == {"attempt": 1, "type": "TimeoutError",
                     "message": "the provider did not answer", "at": clock.now_ms(),
                     "final": False, "retry_at": waiting["not_before"]}
    clock.advance(60_000)
    api.drive()
    done = _detail(api, sub)
    assert done["outcome"] == "failed"
    assert done["failures"]["total"] == 2 and done["failures"]["dropped"] == 0
    assert done["failures"]["attempts"][0] == first
    assert done["failures"]["attempts"][1] == {
        "attempt": 2, "type": "NonRetryable", "message": "the provider refused the request",
        "at": clock.now_ms(), "final": True, "retry_at": None}

    document = api.call("GET", "/v1/openapi.json").json()
    path = document["paths"]["/v1/spaces/{space}/threads/{thread}/submissions/{submission}"]
    schema = path["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**schema, "components": document["components"]}).validate(
        done)
    failures = document["components"]["schemas"]["FailuresView"]
    assert set(failures["required"]) == {"total", "dropped", "attempts"}
    assert "failures" in document["components"]["schemas"]["SubmissionDetail"]["required"]
    # The client reads the same model.
    parsed = SubmissionDetail.model_validate(done)
    assert [(f.attempt, f.final) for f in parsed.failures.attempts] == [(1, False), (2, True)]


def test_a_pass_report_names_the_attempts_that_failed_in_it_as_the_document_describes(
    clock: ManualClock,
) -> None:
    api = make_api(clock, _with_failing)
    failing = str(api.submit("t1", None, agent="failing").json()["id"])
    api.submit("t2", {"text": "hi"}, agent="echo")
    run(api.space.alarm())
    path = f"/v1/spaces/{api.space_id}/maintenance"
    body = api.call("GET", path).json()
    newest = body["pass_reports"][0]
    assert (newest["phase"], newest["failure_type"]) == ("actionable", None)
    assert newest["attempts_failed"] == 1
    assert newest["failed_attempts"] == [{"submission_id": failing, "thread_id": "t1",
                                          "agent": "failing", "attempt": 1,
                                          "error_type": "TimeoutError"}]
    document = api.call("GET", "/v1/openapi.json").json()
    schema = document["paths"]["/v1/spaces/{space}/maintenance"]["get"]["responses"]["200"][
        "content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**schema, "components": document["components"]}).validate(
        body)
    view = document["components"]["schemas"]["PassReportView"]["properties"]
    assert view["failed_attempts"]["items"]["$ref"].endswith("/PassFailedAttemptView")
