"""Keys the runtime derives (a schedule fire's, a message's, a follow-up's) live where no
client key can collide with them."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api

from threadline.schedules import fire_key
from threadline.threads.message_rows import inbound_key
from threadline.threads.model import is_runtime_key

#: One key of each shape the runtime derives, from the code that derives it.
DERIVED = {
    "schedule fire": fire_key("digest", 1_796_074_200_000),
    "schedule fire, second submission": fire_key("digest", 1_796_074_200_000, 1),
    "message admission": inbound_key("sub_3f2a:send"),
    "message admission, long id": inbound_key("sub_" + "a" * 200 + ":send"),
    "follow-up": "sub_000002:submit",
    "follow-up, second": "sub_000002:submit.2",
}


@pytest.mark.parametrize("key", DERIVED.values(), ids=DERIVED.keys())
def test_a_client_cannot_take_a_key_the_runtime_derives(api: Api, key: str) -> None:
    assert is_runtime_key(key)
    answer = api.submit("t1", {"text": "squat"}, agent="echo", idempotency_key=key)
    assert answer.status == 422, answer.body
    problem: dict[str, Any] = answer.json()
    assert problem["field"] == "idempotency_key" and key not in problem["detail"]
    assert api.dump()["tl_submissions"] == []


@pytest.mark.parametrize("key", ["hello-1", "order:42", "Schedule:x", "message:1", "subs-7"])
def test_ordinary_client_keys_are_still_accepted(api: Api, key: str) -> None:
    assert api.submit("t1", {"text": "x"}, agent="echo", idempotency_key=key).status == 202
