"""Control signals the runtime raises through agent code and catches around it.

They derive from ``BaseException`` so an agent that catches ``Exception`` (as agents often do
around a model call) cannot swallow a durable suspension or an observed abort: the signal
always reaches the runtime that raised it. None of them leaves this package.
"""

from __future__ import annotations

from threadline.threads.model import WaitKind


class ControlSignal(BaseException):
    """Base of the runtime's internal signals."""


class Suspend(ControlSignal):
    """The Attempt waits durably: for a decision, or until ``wake_at`` (a timer)."""

    def __init__(
        self,
        kind: WaitKind,
        wait_key: str,
        *,
        payload_json: str | None = None,
        wake_at: int | None = None,
    ) -> None:
        super().__init__(wait_key)
        self.kind = kind
        self.wait_key = wait_key
        self.payload_json = payload_json
        self.wake_at = wake_at


class AbortObserved(ControlSignal):
    """An accepted abort intent was seen at a step boundary."""


class LeaseLost(ControlSignal):
    """This Attempt no longer holds its submission's lease; its writes must stop."""


class StepInFlight(ControlSignal):
    """An uncertain step met at replay still reads ``started``: it may have acted already, so
    the Attempt ends and the submission becomes an Unknown Outcome instead of running it."""


class YieldNow(ControlSignal):
    """The pass's yield deadline passed: release the claim, uncharged, and continue later."""


__all__ = ["AbortObserved", "ControlSignal", "LeaseLost", "StepInFlight", "Suspend", "YieldNow"]
