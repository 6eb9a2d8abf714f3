"""A target's verdict crosses the Durable Object RPC as JSON text: what one side writes the
other reads back, and an answer that is no verdict raises (the sender retries it) instead of
being taken for an acceptance or a refusal."""

from __future__ import annotations

from typing import Any

import pytest

from threadline.threads.routing import Accepted, Refused, verdict_from_json, verdict_to_json


@pytest.mark.parametrize("verdict", [Accepted("sub_1"), Refused("BindingUnavailable: x")])
def test_a_verdict_reads_back_as_written(verdict: Accepted | Refused) -> None:
    assert verdict_from_json(verdict_to_json(verdict)) == verdict


@pytest.mark.parametrize("answer", [
    None, 1, b'{"accepted": true, "submission_id": "s"}', "", "null", "[]", '{"accepted": true}',
    '{"accepted": false}', '{"accepted": "yes", "submission_id": "s"}',
    '{"accepted": true, "submission_id": 5}', '{"accepted": false, "reason": null}',
])
def test_an_answer_that_is_no_verdict_raises(answer: Any) -> None:
    with pytest.raises(ValueError):
        verdict_from_json(answer)
