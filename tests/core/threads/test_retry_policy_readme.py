"""The "Retrying a step" example of README.md runs as written: a plugin whose module is
missing is retried, not failed, and completes once the module is there."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from threadline import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, Submission, SubmissionState

README = Path(__file__).resolve().parents[3] / "README.md"
START = 1_000_000
MODULE = "readme_retry_plugin_answers"


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Retrying a step: `RetryPolicy`\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_retry"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


def test_the_readme_plugin_is_retried_until_its_module_is_deployed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)

    async def scenario() -> tuple[Submission, Submission]:
        async with SimulatedObject(_example()["app"], clock=ManualClock(START)) as obj:
            made = obj.admit("t", "plugin", {"module": MODULE}).id
            await obj.run_alarms(until=START + 800)
            waiting = obj.submission(made)
            # The fix is deployed between two Attempts.
            (tmp_path / f"{MODULE}.py").write_text("ANSWER = 'forty-two'\n", encoding="utf-8")
            importlib.invalidate_caches()
            await obj.run_alarms(until=START + 600_000)
            return waiting, obj.submission(made)

    waiting, done = asyncio.run(scenario())
    assert waiting.state is SubmissionState.READY
    [failed] = waiting.failed_attempts
    assert (failed.type, failed.final) == ("ModuleNotFoundError", False)
    assert (done.outcome, done.result, done.attempts) == (Outcome.COMPLETED, "forty-two", 2)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
