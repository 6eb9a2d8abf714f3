"""A chat agent that takes follow-up input, and the harness around it, for the follow-up tests.

``chat`` answers in one step, during which whatever ``Chat.arriving`` holds is submitted to
its Thread (input arriving while the model is still answering), then takes its follow-ups
once and returns what it saw. ``other`` is a second agent of the same Thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.storage import SqliteStorage
from threadline.testing import ThreadHarness
from threadline.threads.model import Submission
from threadline.threads.turn import Turn

_SETTLED_BODY = "SELECT body_json FROM tl_history WHERE record_id = ?"


class Chat:
    """The harness, the input to submit while the head answers, and what each run saw."""

    def __init__(self, storage: SqliteStorage, clock: ManualClock,
                 config: RuntimeConfig | None = None,
                 extra: Callable[[Turn], Any] | None = None) -> None:
        self.config = config if config is not None else RuntimeConfig()
        #: (agent, input) pairs submitted to the Thread from inside the head's answer step.
        self.arriving: list[tuple[str, Any]] = []
        #: The ids submitted that way, in order.
        self.arrived: list[str] = []
        #: What each run of ``chat`` got from ``followups()``: lists of (id, input).
        self.seen: list[list[tuple[str, Any]]] = []
        self.answers = 0
        self._extra = extra
        self.h = ThreadHarness(storage, clock, self._build)

    def _build(self) -> Application:
        app = Application(self.config)

        @app.agent("chat", join_followups=True)
        async def chat(turn: Turn) -> Any:
            await turn.step("answer", self._answer)
            taken = await turn.followups()
            self.seen.append([(item.submission_id, item.input) for item in taken])
            if self._extra is not None:
                await self._extra(turn)
            return {"input": turn.input, "followups": [item.input for item in taken]}

        @app.agent("other")
        async def other(turn: Turn) -> Any:
            return {"other": turn.input}

        @app.agent("plain")
        async def plain(turn: Turn) -> Any:
            return await turn.followups()

        return app

    def _answer(self) -> str:
        self.answers += 1
        while self.arriving:
            agent, value = self.arriving.pop(0)
            self.arrived.append(self.h.admit("t", value, agent=agent).id)
        return "answered"

    def admit(self, value: Any, agent: str = "chat") -> Submission:
        """Submit ``value`` to the Thread ``t`` now."""
        return self.h.admit("t", value, agent=agent)

    def run_head(self) -> Any:
        """Run one Attempt of the Thread's head."""
        return asyncio.run(self.h.runtime.process_thread_head("t"))

    def drive(self) -> Any:
        """Recover and run the Thread until nothing changes."""
        return asyncio.run(self.h.drive())

    def settled_body(self, submission_id: str) -> Any:
        """The body of the submission's settled record."""
        row = self.h.storage.exec(_SETTLED_BODY, f"{submission_id}:settled").one()
        return json.loads(row["body_json"])
