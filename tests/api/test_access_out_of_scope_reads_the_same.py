"""A principal scoped to one Thread cannot tell another Thread's submission from a missing one,
on any submission route."""

from __future__ import annotations

import pytest
from api_support import Api
from edge_support import Worker

ROUTES = [
    ("GET", ""),
    ("POST", "/abort"),
    ("POST", "/approvals/ok"),
    ("POST", "/resolve"),
]
BODIES = {"/abort": {}, "/approvals/ok": {"approved": True}, "/resolve": {"action": "retry"}}


@pytest.mark.parametrize(("method", "suffix"), ROUTES, ids=[r[1] or "get" for r in ROUTES])
def test_another_threads_submission_reads_like_a_missing_one(
    api: Api, method: str, suffix: str
) -> None:
    worker = Worker(api)
    answer = api.submit("t2", {"text": "private"}, agent="echo")
    assert answer.status == 202, answer.body
    theirs = answer.json()["id"]
    token = worker.mint(thread="t1", capabilities=("read", "abort", "decide"))
    base = "/v1/spaces/acme/threads/t1/submissions/"
    body = BODIES.get(suffix)
    other = worker.call(method, base + theirs + suffix, body, token=token)
    missing_id = "sub_" + "0" * (len(theirs) - 4)
    missing = worker.call(method, base + missing_id + suffix, body, token=token)
    assert other.status == missing.status == 404
    assert other.json()["detail"].replace(theirs, "<id>") == \
        missing.json()["detail"].replace(missing_id, "<id>")
    assert {k: v for k, v in other.json().items() if k != "detail"} == \
        {k: v for k, v in missing.json().items() if k != "detail"}
