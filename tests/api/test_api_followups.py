"""Over HTTP, a submission joined into a running head as follow-up input shows state
``joined`` and the head it joined (``joined_to``, kept once it settled with that head);
aborting it alone is a 409 naming the head. The responses match the OpenAPI document."""

from __future__ import annotations

from typing import Any

from api_support import Api, make_api
from test_api_openapi import _check, _document

from threadline import Application, ManualClock, Turn


def _with_chat(app: Application) -> None:
    @app.agent("joiner", join_followups=True)
    async def chat(turn: Turn) -> Any:
        taken = await turn.followups()
        await turn.approval("send", {"followups": len(taken)})
        return {"input": turn.input, "followups": [item.input for item in taken]}


def _get(api: Api, sub: str) -> dict[str, Any]:
    response = api.call("GET", api.submission_path("t1", sub))
    assert response.status == 200
    return dict(response.json())


def test_a_joined_submission_shows_its_head_and_refuses_an_abort_alone(
    clock: ManualClock,
) -> None:
    api = make_api(clock, _with_chat)
    document = _document(api)
    head = str(api.submit("t1", "hi", agent="joiner").json()["id"])
    more = str(api.submit("t1", "and more", agent="joiner").json()["id"])
    assert _get(api, more)["joined_to"] is None
    api.drive()  # the head takes its follow-up, then waits for the approval

    joined = _get(api, more)
    assert (joined["state"], joined["joined_to"]) == ("joined", head)
    _check(document, "GET", api.submission_path("t1", more), 200, joined, "application/json")
    assert _get(api, head)["joined_to"] is None

    refused = api.call("POST", api.submission_path("t1", more) + "/abort", {"reason": "oops"})
    assert refused.status == 409
    assert refused.json()["type"] == "urn:threadline:problem:conflict"
    assert head in refused.json()["detail"]
    assert _get(api, more)["state"] == "joined"

    decided = api.call("POST", api.submission_path("t1", head) + "/approvals/send",
                       {"approved": True})
    assert decided.status == 200
    api.drive()
    done = _get(api, more)
    result = {"input": "hi", "followups": ["and more"]}
    assert (done["state"], done["outcome"], done["result"], done["joined_to"]) == (
        "settled", "completed", result, head)
    _check(document, "GET", api.submission_path("t1", more), 200, done, "application/json")
    assert _get(api, head)["result"] == result


def test_the_document_describes_joined_to(clock: ManualClock) -> None:
    api = make_api(clock, _with_chat)
    detail = _document(api)["components"]["schemas"]["SubmissionDetail"]
    assert "joined_to" in detail["required"]
    assert "follow-up" in detail["properties"]["joined_to"]["description"]
