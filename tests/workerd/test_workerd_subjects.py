"""Who did it, through the real Worker and object: the subject of a scoped token's principal
is recorded on what its holder causes, and a ``threadline-subject`` header a client sends is
dropped by the Worker, never recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from workerd_runtime import SIGNING_KEYS as KEYS
from workerd_runtime import TOKEN, Runtime, wait_for

from threadline import access
from threadline.access import SUBJECT_HEADER

SPACE = "subject-tests"
TIMEOUT_S = 20.0


@pytest.fixture
def runtime(signed: Runtime) -> Runtime:
    return signed


def _thread(name: str) -> str:
    return f"/v1/spaces/{SPACE}/threads/{name}"


def _token(subject: str, *capabilities: str) -> str:
    return access.mint(KEYS, space=SPACE, capabilities=capabilities, subject=subject)


def _post(runtime: Runtime, path: str, body: object, token: str,
          headers: dict[str, str] | None = None) -> dict[str, Any]:
    reply = runtime.request(path, method="POST", token=token, body=json.dumps(body).encode(),
                            headers=headers)
    assert reply.status in (200, 202), (reply.status, reply.body)
    return dict(reply.json())


def _detail(runtime: Runtime, thread: str, sub: str) -> dict[str, Any]:
    reply = runtime.request(_thread(thread) + f"/submissions/{sub}", token=TOKEN)
    assert reply.status == 200, reply.body
    return dict(reply.json())


def _records(runtime: Runtime, thread: str, sub: str) -> dict[str, dict[str, Any]]:
    page = runtime.request(_thread(thread) + "/history", token=TOKEN).json()
    return {r["kind"]: r["body"] for r in page["records"]
            if r["submission_id"] == sub and r["kind"] != "record"}


def test_scoped_principals_are_recorded_on_what_they_cause(runtime: Runtime) -> None:
    alice = _token("user:alice", "submit")
    sub = _post(runtime, _thread("t1") + "/submissions",
                {"agent": "confirm", "input": {"text": "ship"}}, alice)["id"]
    wait_for(lambda: _detail(runtime, "t1", sub)["state"] == "suspended", timeout=TIMEOUT_S,
             what="the confirm submission to wait for its approval")
    _post(runtime, _thread("t1") + f"/submissions/{sub}/approvals/confirm", {"approved": True},
          _token("ops:carol", "decide"))
    done = wait_for(lambda: (d := _detail(runtime, "t1", sub))["state"] == "settled" and d,
                    timeout=TIMEOUT_S, what="the approved submission to settle")
    assert done["submitted_by"] == "user:alice"
    assert [(w["key"], w["decided_by"]) for w in done["waits"]] == [("confirm", "ops:carol")]
    records = _records(runtime, "t1", sub)
    assert records["approval.decided"] == {"submission_id": sub, "key": "confirm",
                                           "approved": True, "decided_by": "ops:carol"}
    assert records["submission.settled"]["submitted_by"] == "user:alice"


def test_the_settled_record_of_an_aborted_submission_names_who_aborted(runtime: Runtime) -> None:
    # Held behind a suspended head, so the abort finds it queued and settles it at once.
    head = _post(runtime, _thread("t2") + "/submissions",
                 {"agent": "confirm", "input": {"text": "first"}}, TOKEN)["id"]
    wait_for(lambda: _detail(runtime, "t2", head)["state"] == "suspended", timeout=TIMEOUT_S,
             what="the head to wait for its approval")
    sub = _post(runtime, _thread("t2") + "/submissions",
                {"agent": "echo", "input": {"text": "later"}}, _token("user:bob", "submit"))["id"]
    aborted = _post(runtime, _thread("t2") + f"/submissions/{sub}/abort", {"reason": "no"},
                    _token("ops:dave", "abort"))
    assert (aborted["outcome"], aborted["abort"]["requested_by"]) == ("aborted", "ops:dave")
    assert _records(runtime, "t2", sub)["submission.settled"] == {
        "submission_id": sub, "outcome": "aborted",
        "error": {"type": "Aborted", "message": "no"},
        "submitted_by": "user:bob", "aborted_by": "ops:dave"}


def test_a_subject_header_sent_by_a_client_is_never_recorded(runtime: Runtime) -> None:
    forged = {SUBJECT_HEADER: "user:mallory"}
    anonymous = _post(runtime, _thread("t3") + "/submissions",
                      {"agent": "echo", "input": {"text": "a"}}, TOKEN, forged)
    assert anonymous["submitted_by"] is None  # the API token's principal names no subject
    scoped = _post(runtime, _thread("t3") + "/submissions",
                   {"agent": "echo", "input": {"text": "b"}}, _token("user:erin", "submit"),
                   forged)
    assert scoped["submitted_by"] == "user:erin"
