"""The "Thread log" example of README.md runs as written, against the in-process API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from api_support import Api
from test_client import _client

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    examples = [block for block in blocks if "def settled_since" in block]
    assert len(examples) == 1, "README should show one settled_since example"
    namespace: dict[str, Any] = {"__name__": "readme_thread_log"}
    exec(compile(examples[0], str(README), "exec"), namespace)
    return namespace


def test_the_readme_log_example_learns_every_settlement_once_and_resumes(api: Api) -> None:
    settled_since = _example()["settled_since"]
    first = api.submit("t1", {"text": "one"}, agent="echo").json()["id"]
    second = api.submit("t1", {"text": "two"}, agent="confirm").json()["id"]
    api.drive()
    with _client(api) as client:
        # The echo settled; the confirm waits for its approval (a record, not a settlement).
        settled, after = settled_since(client, "acme", "t1")
        assert settled == [(first, "completed")]
        api.call("POST", api.submission_path("t1", second) + "/approvals/confirm",
                 {"approved": False})
        third = api.submit("t1", {"text": "three"}, agent="echo").json()["id"]
        aborted = api.submit("t1", {"text": "never"}, agent="echo").json()["id"]
        api.call("POST", api.submission_path("t1", aborted) + "/abort", {})
        api.drive()
        # Resumed after the seq it stopped at: only what settled since, in log order.
        more, resumed = settled_since(client, "acme", "t1", after)
        assert more == [(aborted, "aborted"), (second, "completed"), (third, "completed")]
        assert settled_since(client, "acme", "t1", resumed) == ([], resumed)
