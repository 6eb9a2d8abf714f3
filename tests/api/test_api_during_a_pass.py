"""HTTP requests that land while a maintenance pass runs an Attempt in the same object.

The routes and the pass share one runtime and one gate. An abort of the running submission,
an admission to another Thread and one to the running Thread itself, all sent while the
Attempt waits inside an uncertain step, must leave: one settlement per submission (the
aborted one aborted, its step run once), the new input of another Thread run in the same
pass (it must not wait for the long Attempt), and FIFO behind the running head.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from typing import Any

import pytest

from threadline.api.http import Request, Response
from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.testing import Effects, SettlementLog, SimulatedObject
from threadline.threads.model import Outcome
from threadline.threads.turn import Turn

SPACE = "/v1/spaces/s1/threads"


def _app(
    effects: Effects, clock: ManualClock, during: list[Any], order: list[str]
) -> Application:
    app = Application(RuntimeConfig(native_concurrency=4))

    @app.agent("slow")
    async def slow(turn: Turn) -> dict[str, str]:
        async def call() -> str:
            effects.hit(f"call:{turn.submission_id}")
            if during:
                # Requests arrive from outside the pass, as the platform delivers them.
                asyncio.get_running_loop().call_soon(during.pop(), context=contextvars.Context())
            await clock.sleep_until(clock.now_ms() + 10_000)
            order.append("call returned")
            return "done"

        await turn.step("call", call, effect="uncertain")
        await turn.emit({"text": "after the call"})
        return {"ok": "yes"}

    @app.agent("echo")
    async def echo(turn: Turn) -> dict[str, str]:
        effects.hit(f"echo:{turn.submission_id}")
        order.append(f"echo:{turn.thread_id}")
        return {"ok": "echo"}

    return app


def _post(path: str, body: dict[str, Any]) -> Request:
    return Request.from_url("POST", f"http://object{path}", {"content-type": "application/json"},
                            json.dumps(body).encode())


async def _run(monkeypatch: pytest.MonkeyPatch) -> None:
    effects = Effects()
    clock = ManualClock()
    during: list[Any] = []
    order: list[str] = []
    responses: list[asyncio.Task[Response]] = []
    async with SimulatedObject(_app(effects, clock, during, order), clock=clock,
                               check_alarm_invariant=True) as obj:
        log = SettlementLog()
        head = obj.admit("t-run", "slow", {})

        def arrive() -> None:
            for request in (
                _post(f"{SPACE}/t-run/submissions/{head.id}/abort", {"reason": "stop"}),
                _post(f"{SPACE}/t-run/submissions", {"agent": "echo", "input": {"n": 1}}),
                _post(f"{SPACE}/t-other/submissions", {"agent": "echo", "input": {"n": 2}}),
            ):
                responses.append(asyncio.ensure_future(obj.space.handle(request)))

        during.append(arrive)
        log.install(monkeypatch)
        reports = await obj.run_alarms(max_passes=20)
        assert [r.status for r in [t.result() for t in responses]] == [200, 202, 202]

        aborted = obj.submission(head.id)
        assert aborted.outcome is Outcome.ABORTED
        assert effects.count(f"call:{head.id}") == 1
        (follower,) = [s for s in obj.submissions("t-run") if s.id != head.id]
        (other,) = obj.submissions("t-other")
        assert follower.outcome is Outcome.COMPLETED and other.outcome is Outcome.COMPLETED
        for submission in (head, follower, other):
            assert log.count(submission.id) == 1
        # The other Thread's input ran beside the long Attempt, not after it; the follower on
        # the running Thread waited for its head (FIFO).
        assert order == ["echo:t-other", "call returned", "echo:t-run"]
        assert reports[0].settled >= 1
        assert obj.alarm_at is None


def test_requests_during_a_pass_keep_one_settlement_and_fifo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asyncio.run(_run(monkeypatch))
