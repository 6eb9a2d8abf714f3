"""The "Input models" example of README.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from api_support import Api

from threadline import ManualClock

README = Path(__file__).resolve().parents[2] / "README.md"


def _app() -> Any:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Input models\n")
    section = text[start:text.index("\n## ", start + 1)]
    [block] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "readme_input_models"}
    exec(compile(block, str(README), "exec"), namespace)
    return namespace["app"]


def test_the_readme_input_model_admits_good_input_and_refuses_bad() -> None:
    api = Api(_app(), ManualClock(1_000_000))
    refused = api.submit("t", {"temperature": 3}, agent="chat")
    assert refused.status == 422
    assert "input.text: Field required" in refused.json()["detail"]
    assert "input.temperature" in refused.json()["detail"]
    made = api.submit("t", {"text": "hi"}, agent="chat")
    assert made.status == 202
    api.drive()
    done = api.call("GET", api.submission_path("t", made.json()["id"])).json()
    assert done["result"] == {"text": "hi", "temperature": 0.5}
