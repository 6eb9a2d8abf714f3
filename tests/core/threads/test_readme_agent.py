"""The agent shown in README.md runs as written: docs and code cannot drift apart."""

import asyncio
import re
from pathlib import Path
from typing import Any

from threadline import Application, ManualClock, SqliteStorage
from threadline.storage import migrate
from threadline.testing import ThreadHarness
from threadline.threads import Outcome, SubmissionState

README = Path(__file__).resolve().parents[3] / "README.md"


def _readme_app() -> Application:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    agent_blocks = [
        block for block in blocks
        if "@app.agent" in block and "threadline.testing" not in block and "@app.lane" not in block
        and "@app.cron" not in block
        and "turn.submit" not in block  # the Delayed submissions section's own, run on its own
        and "turn.followups" not in block  # the Follow-up input section's own, likewise
        and "turn.send" not in block  # the Messages section's own, run on its own
        and "@app.subscriber" not in block  # the Subscribers section's own, likewise
        and "turn.env" not in block  # the Secrets and bindings section's own, likewise
        and "turn.history" not in block  # the An agent's context section's own, likewise
        and "turn.http" not in block  # the Calling a model section's own, likewise
        and "turn.stream" not in block  # the Streaming an answer section's own, likewise
        and "input=" not in block  # the Input models section's own, likewise
        and "rate=" not in block  # the Provider limits section's own, likewise
        and "retry_unfixable" not in block  # the Retrying a step section's own, likewise
        and "run_durably" not in block  # the Pydantic AI section's own, likewise
    ]
    assert len(agent_blocks) == 1, "README should show exactly one agent"
    namespace: dict[str, Any] = {}
    exec(compile(agent_blocks[0], str(README), "exec"), namespace)
    app = namespace["app"]
    assert isinstance(app, Application)
    return app


def test_the_readme_agent_suspends_for_approval_then_completes() -> None:
    storage = SqliteStorage(":memory:")
    migrate(storage)
    harness = ThreadHarness(storage, ManualClock(), _readme_app)
    submission = harness.admit("t1", "hello", agent="support")

    asyncio.run(harness.drive())
    assert harness.get(submission.id).state == SubmissionState.SUSPENDED

    harness.ledger.decide_approval(submission.id, "send", approved=True)
    settled = asyncio.run(harness.drive())
    assert [(s.outcome, s.result) for s in settled] == [(Outcome.COMPLETED, {"status": "ok"})]
    history = storage.exec("SELECT body_json FROM tl_history WHERE thread_id = 't1'").rows
    assert any("echo hello" in row["body_json"] for row in history)
