"""The operators' example of README.md runs as written: it skips the oversized record a queue
subscriber is parked on, resumes the other parked subscriber and retries the parked lane."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from operator_support import Stuck

from threadline.client import Client
from threadline.threads.records import SUBSCRIBER_SKIPPED

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    examples = [block for block in blocks if "def unstick" in block]
    assert len(examples) == 1, "README should show one unstick example"
    namespace: dict[str, Any] = {"__name__": "readme_operators"}
    exec(compile(examples[0], str(README), "exec"), namespace)
    return namespace


def test_the_readme_example_skips_the_oversized_record_resumes_and_retries() -> None:
    unstick = _example()["unstick"]
    stuck = Stuck()
    try:
        stuck.crm_fixed = stuck.poll_fixed = True
        oversized = stuck.obj.storage.exec(
            "SELECT record_id FROM tl_history WHERE thread_id = 't1' AND seq = 3").one()
        with Client("http://threadline.test", stuck.token(),
                    transport=stuck.transport()) as client:
            assert unstick(client, "acme") == [
                f"audit: skipped {oversized['record_id']}", "crm: resumed at 0",
                "poll: retried"]
            stuck.settle()
            assert unstick(client, "acme") == []  # nothing is parked any more
        assert stuck.queue.sent()[2:] == [(4, "submission.settled"), (5, "note"),
                                          (6, "submission.settled"), (7, SUBSCRIBER_SKIPPED)]
        assert [record.seq for record in stuck.crm] == [1, 2, 3, 4, 5, 6, 7]
    finally:
        stuck.close()
