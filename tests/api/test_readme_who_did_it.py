"""The "Who did it" example of README.md runs as written, against the in-process API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from api_support import Api
from test_client import _client

from threadline.access import SUBJECT_HEADER

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    examples = [block for block in blocks if "def who_did_it" in block]
    assert len(examples) == 1, "README should show one who_did_it example"
    namespace: dict[str, Any] = {"__name__": "readme_who_did_it"}
    exec(compile(examples[0], str(README), "exec"), namespace)
    return namespace


def _post(api: Api, path: str, body: dict[str, Any], subject: str) -> dict[str, Any]:
    response = api.call("POST", path, body, headers={SUBJECT_HEADER: subject})
    assert response.status in (200, 202), response.json()
    return dict(response.json())


def test_the_readme_example_names_who_submitted_approved_and_aborted(api: Api) -> None:
    who_did_it = _example()["who_did_it"]
    submissions = api.thread_path("t1") + "/submissions"
    approved = _post(api, submissions, {"input": {"text": "go"}, "agent": "confirm"},
                     "user:alice")["id"]
    aborted = _post(api, submissions, {"input": {"text": "no"}, "agent": "confirm"},
                    "user:bob")["id"]
    api.drive()
    _post(api, api.submission_path("t1", approved) + "/approvals/confirm", {"approved": True},
          "ops:carol")
    api.drive()
    _post(api, api.submission_path("t1", aborted) + "/abort", {}, "ops:dave")
    unknown = api.submit("t1", {"text": "anon"}, agent="echo").json()["id"]
    with _client(api) as client:
        assert who_did_it(client, "acme", "t1", approved) == {
            "submitted_by": "user:alice", "decided_by": {"approval:confirm": "ops:carol"},
            "aborted_by": None}
        assert who_did_it(client, "acme", "t1", aborted) == {
            "submitted_by": "user:bob", "decided_by": {}, "aborted_by": "ops:dave"}
        assert who_did_it(client, "acme", "t1", unknown) == {
            "submitted_by": None, "decided_by": {}, "aborted_by": None}
