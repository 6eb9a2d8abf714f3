"""Every class of bad input is a problem+json answer with a stable type, and writes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_support import Api, make_api

from threadline import ManualClock
from threadline.api.problems import PROBLEM_CONTENT_TYPE, PROBLEM_TYPES

SPACE = "/v1/spaces/acme"
THREAD = SPACE + "/threads/t1"


@pytest.fixture
def seeded(clock: ManualClock) -> tuple[Api, dict[str, str]]:
    """A space with a settled, a suspended and a queued submission."""
    api = make_api(clock)
    done = api.submit("t1", {"text": "a"}, agent="echo", idempotency_key="k").json()["id"]
    waiting = api.submit("t1", {"text": "b"}, agent="confirm").json()["id"]
    api.drive()
    queued = api.submit("t1", {"text": "c"}, agent="echo").json()["id"]
    return api, {"done": done, "waiting": waiting, "queued": queued}


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


BIG = b'{"input": "' + b"x" * 1_048_576 + b'"}'

# (method, path with {done}/{waiting}/{queued}, body, status, problem slug, field)
CASES: list[tuple[str, str, Any, int, str, str | None]] = [
    # malformed JSON: 400
    ("POST", THREAD + "/submissions", b"{", 400, "invalid-json", "body"),
    ("POST", THREAD + "/submissions", b'{"input": NaN}', 400, "invalid-json", "body"),
    ("POST", THREAD + "/submissions", b'{"input": Infinity}', 400, "invalid-json", "body"),
    ("POST", THREAD + "/submissions", b'{"input": "\xff"}', 400, "invalid-json", "body"),
    ("POST", THREAD + "/submissions/{queued}/abort", b"[1,", 400, "invalid-json", "body"),
    ("POST", THREAD + "/submissions/{waiting}/approvals/confirm", b"tru", 400, "invalid-json",
     "body"),
    ("POST", THREAD + "/submissions/{queued}/resolve", b"{'action': 1}", 400, "invalid-json",
     "body"),
    # schema violations: 422 naming the field
    ("POST", THREAD + "/submissions", {}, 422, "validation", "input"),
    ("POST", THREAD + "/submissions", [1, 2], 422, "validation", "body"),
    ("POST", THREAD + "/submissions", {"input": 1, "agent": "echo", "inptu": 2}, 422,
     "validation", "inptu"),
    ("POST", THREAD + "/submissions", {"input": 1, "agent": 7}, 422, "validation", "agent"),
    ("POST", THREAD + "/submissions", {"input": 1, "agent": "bad agent"}, 422, "validation",
     "agent"),
    ("POST", THREAD + "/submissions", {"input": 1, "agent": "echo", "idempotency_key": "a b"},
     422, "validation", "idempotency_key"),
    ("POST", THREAD + "/submissions", {"input": 1, "agent": "echo", "idempotency_key": ""},
     422, "validation", "idempotency_key"),
    ("POST", THREAD + "/submissions", {"input": "\ud800", "agent": "echo"}, 422, "validation",
     "input"),
    ("POST", THREAD + "/submissions", b'{"agent": "echo", "input": ' + b"[" * 128 + b"]" * 128
     + b"}", 422, "validation", "input"),
    ("POST", THREAD + "/submissions/{waiting}/approvals/confirm",
     b'{"approved": true, "payload": {"a": ' + b"[" * 200 + b"]" * 200 + b"}}", 422,
     "validation", "payload"),
    ("POST", THREAD + "/submissions/{queued}/abort", {"reason": 5}, 422, "validation", "reason"),
    ("POST", THREAD + "/submissions/{queued}/abort", {"reason": "x" * 2_001}, 422,
     "validation", "reason"),
    ("POST", THREAD + "/submissions/{waiting}/approvals/confirm", {"approved": "yes"}, 422,
     "validation", "approved"),
    ("POST", THREAD + "/submissions/{waiting}/approvals/confirm", {"approved": 1}, 422,
     "validation", "approved"),
    ("POST", THREAD + "/submissions/{waiting}/approvals/confirm", {}, 422, "validation",
     "approved"),
    ("POST", THREAD + "/submissions/{waiting}/approvals/confirm",
     {"approved": True, "payload": "\udc80"}, 422, "validation", "payload"),
    ("GET", THREAD + "/history?after=-1", None, 422, "validation", "after"),
    ("GET", THREAD + "/history?after=x", None, 422, "validation", "after"),
    ("GET", THREAD + "/history?limit=0", None, 422, "validation", "limit"),
    ("GET", THREAD + "/history?after=99999999999999999999", None, 422, "validation", "after"),
    ("GET", THREAD + "/history?after=9007199254740992", None, 422, "validation", "after"),
    ("GET", THREAD + "/history?limit=1001", None, 422, "validation", "limit"),
    # a seq past the last record of a Thread that has none yet
    ("GET", SPACE + "/threads/none/events?after=1", None, 422, "validation", "after"),
    ("GET", SPACE + "/threads?after=bad%20id", None, 422, "validation", "after"),
    ("GET", SPACE + "/threads?limit=-5", None, 422, "validation", "limit"),
    # conflicts: 409
    ("POST", THREAD + "/submissions", {"input": {"text": "other"}, "agent": "echo",
                                       "idempotency_key": "k"}, 409, "conflict",
     "idempotency_key"),
    ("POST", THREAD + "/submissions/{queued}/resolve", {"action": "retry"}, 409, "conflict",
     None),
    ("POST", THREAD + "/submissions/{done}/resolve", {"action": "accept", "result": 1}, 409,
     "conflict", None),
    # unknown resources: 404
    ("GET", THREAD + "/submissions/sub_none", None, 404, "not-found", "submission"),
    ("POST", THREAD + "/submissions/sub_none/abort", {}, 404, "not-found", "submission"),
    ("POST", THREAD + "/submissions/{done}/approvals/confirm", {"approved": True}, 404,
     "not-found", "key"),
    # unknown routes: 404; wrong methods: 405
    ("GET", "/v1/nothing", None, 404, "not-found", None),
    ("GET", THREAD + "/submissions/{done}/cancel", None, 404, "not-found", None),
    ("GET", SPACE + "/threads/", None, 404, "not-found", None),
    ("DELETE", THREAD, None, 405, "method-not-allowed", None),
    ("GET", THREAD + "/submissions", None, 405, "method-not-allowed", None),
    ("PUT", THREAD + "/submissions/{queued}/abort", {}, 405, "method-not-allowed", None),
    ("POST", SPACE + "/maintenance", {}, 405, "method-not-allowed", None),
    ("POST", "/v1/health", {}, 405, "method-not-allowed", None),
    # bad path ids: 400
    ("GET", SPACE + "/threads/..", None, 400, "invalid-id", "thread"),
    ("GET", SPACE + "/threads/.", None, 400, "invalid-id", "thread"),
    ("POST", "/v1/spaces/../threads/t1/submissions", {"input": 1, "agent": "echo"}, 400,
     "invalid-id", "space"),
    ("POST", SPACE + "/threads/bad%20id/submissions", {"input": 1, "agent": "echo"}, 400,
     "invalid-id", "thread"),
    ("POST", SPACE + "/threads/" + "t" * 129 + "/submissions", {"input": 1, "agent": "echo"},
     400, "invalid-id", "thread"),
    ("POST", THREAD + "/submissions/{waiting}/approvals/..", {"approved": True}, 400,
     "invalid-id", "key"),
    # too large: 413
    ("POST", THREAD + "/submissions", BIG, 413, "payload-too-large", "body"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "slug", "field"), CASES)
def test_bad_input_is_a_problem_and_writes_nothing(
    seeded: tuple[Api, dict[str, str]], method: str, path: str, body: Any, status: int,
    slug: str, field: str | None,
) -> None:
    api, ids = seeded
    before = api.dump()
    response = api.call(method, path.format(**ids), body=b"" if body is None else _raw(body))
    assert response.status == status, response.body
    assert response.headers["content-type"] == PROBLEM_CONTENT_TYPE
    problem = response.json()
    assert problem["type"] == f"urn:threadline:problem:{slug}"
    assert (problem["status"], problem["title"]) == PROBLEM_TYPES[slug]
    assert problem.get("field") == field
    if field is not None and field != "body":
        assert field in problem["detail"]
    assert api.dump() == before


def test_405_names_the_allowed_methods(api: Api) -> None:
    response = api.call("DELETE", THREAD)
    assert response.headers["allow"] == "GET, HEAD"
    assert api.call("GET", THREAD + "/submissions").headers["allow"] == "POST"


def test_a_schema_violation_lists_every_offending_field(api: Api) -> None:
    response = api.call("POST", THREAD + "/submissions", {"agent": 3, "idempotency_key": "a b"})
    assert response.status == 422
    fields = sorted(error["field"] for error in response.json()["errors"])
    assert fields == ["agent", "idempotency_key", "input"]


def test_head_answers_like_get_without_a_body(api: Api) -> None:
    api.submit("t1", {"text": "x"}, agent="echo")
    response = api.call("HEAD", THREAD)
    assert response.status == 200 and response.body == b""


def test_an_unexpected_failure_is_a_bare_500(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internals")

    sub = api.submit("t1", {"text": "x"}, agent="echo").json()["id"]
    monkeypatch.setattr(api.space.runtime.ledger, "get", broken)
    response = api.call("GET", f"{THREAD}/submissions/{sub}")
    assert response.status == 500
    assert response.json()["type"] == "urn:threadline:problem:internal"
    assert b"secret internals" not in response.body
