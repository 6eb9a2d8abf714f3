"""Helpers for the delayed-submission tests: an app whose agents record when they ran, and an
object over ``threadline.testing`` that checks the alarm invariant after every commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.testing import SimulatedObject
from threadline.threads.model import Submission, SubmissionState

START = 1_700_000_000_000
MINUTE = 60_000
CONFIG = RuntimeConfig(alarm_backoff_base_ms=100, alarm_backoff_cap_ms=2_000)


@dataclass
class Ran:
    """What the agents did, in order: (input, clock when its Attempt ran)."""

    runs: list[tuple[Any, int]] = field(default_factory=list)

    def inputs(self) -> list[Any]:
        return [value for value, _ in self.runs]

    def at(self, value: Any) -> int:
        """When the first Attempt with input ``value`` ran."""
        for ran, when in self.runs:
            if ran == value:
                return when
        raise AssertionError(f"{value!r} never ran (ran: {self.inputs()})")


def build_app(ran: Ran, clock: ManualClock) -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        ran.runs.append((turn.input, clock.now_ms()))
        return await turn.step("say", lambda: {"got": turn.input})

    @app.agent("gate")
    async def gate(turn: Turn) -> Any:
        # Holds its Thread until someone approves.
        ran.runs.append((turn.input, clock.now_ms()))
        decision = await turn.approval("go")
        return {"approved": decision.approved}

    return app


def simulated(ran: Ran, *, clock: ManualClock | None = None) -> SimulatedObject:
    chosen = clock if clock is not None else ManualClock(START)
    return SimulatedObject(build_app(ran, chosen), clock=chosen, check_alarm_invariant=True)


def admitted(obj: SimulatedObject, submission_id: str) -> Submission:
    """The submission, once it has its place in the FIFO."""
    found = obj.find(submission_id)
    assert isinstance(found, Submission), f"{submission_id} is still {found.state}"
    return found


def settled(obj: SimulatedObject, submission_id: str) -> Submission:
    sub = admitted(obj, submission_id)
    assert sub.state is SubmissionState.SETTLED, sub
    return sub


def pending(obj: SimulatedObject) -> int:
    return int(obj.storage.exec("SELECT COUNT(*) AS n FROM tl_delayed").one()["n"])
