"""The example agents of src/entry.py, as shipped, behave as the README and issue describe."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api, load_example_app


def _run(api: Api, agent: str, input: Any) -> dict[str, Any]:
    sub = api.submit("t1", input, agent=agent).json()["id"]
    api.drive()
    return dict(api.call("GET", api.submission_path("t1", sub)).json())


def _history(api: Api) -> list[Any]:
    """What the agents emitted: the Thread's records of kind ``record``."""
    page = api.call("GET", api.thread_path("t1") + "/history").json()
    return [record["body"] for record in page["records"] if record["kind"] == "record"]


def test_the_example_app_registers_chat_echo_and_confirm() -> None:
    assert [binding.name for binding in load_example_app().agents] == ["chat", "confirm", "echo"]


def test_echo_journals_one_step_emits_and_returns_the_text(api: Api) -> None:
    done = _run(api, "echo", {"text": "hello"})
    assert (done["outcome"], done["result"]) == ("completed", {"text": "hello"})
    assert [e["key"] for e in done["journal"]["entries"]] == ["step:echo"]
    assert _history(api) == [{"role": "assistant", "text": "hello"}]


def test_confirm_asks_then_emits_only_when_approved(api: Api) -> None:
    sub = api.submit("t1", {"text": "deploy"}, agent="confirm").json()["id"]
    api.drive()
    waiting = api.call("GET", api.submission_path("t1", sub)).json()
    assert waiting["state"] == "suspended"
    assert waiting["waits"][0]["key"] == "confirm"
    assert waiting["waits"][0]["payload"] == {"text": "deploy"}
    assert _history(api) == []
    api.call("POST", api.submission_path("t1", sub) + "/approvals/confirm", {"approved": True})
    api.drive()
    done = api.call("GET", api.submission_path("t1", sub)).json()
    assert done["result"] == {"approved": True}
    assert _history(api) == [{"role": "assistant", "text": "deploy"}]


@pytest.mark.parametrize("agent", ["echo", "confirm", "chat"])
@pytest.mark.parametrize("bad", [None, "hello", {"text": 5}, {"txt": "x"}])
def test_input_that_is_not_text_fails_at_once(api: Api, agent: str, bad: Any) -> None:
    done = _run(api, agent, bad)
    assert done["outcome"] == "failed" and done["attempts"] == 1
    assert done["error"]["type"] == "NonRetryable" and "text" in done["error"]["message"]
