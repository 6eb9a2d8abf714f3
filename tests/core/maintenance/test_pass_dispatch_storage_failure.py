"""A storage failure while one Thread is being dispatched (its head claimed, or parked on an
unregistered agent) is that Thread's problem: the Attempts of other Threads running in the
same pass are not cancelled (an uncertain step of theirs in flight must not become an Unknown
Outcome), and the failed Thread is taken up again later."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.testing import Effects, SimulatedObject
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn

CLAIM_SQL = "SET state = 'running'"
PARK_SQL = "INSERT INTO tl_binding_waits"


def _app(
    effects: Effects, clock: ManualClock, holder: list[SimulatedObject], failing: str, agent: str
) -> Application:
    app = Application(RuntimeConfig(native_concurrency=4))

    @app.agent("charges")
    async def charges(turn: Turn) -> dict[str, int]:
        def arrive() -> None:
            holder[0].fail_statements(failing, times=1)
            holder.append(holder[0])  # marks that the input below was admitted
            holder[0].admit("t-b", agent, {})

        async def charge() -> int:
            effects.hit("charge")
            # Input for another Thread arrives meanwhile (from a request, outside the pass);
            # the pass dispatches it at once, and storage refuses a write of that dispatch.
            asyncio.get_running_loop().call_soon(arrive, context=contextvars.Context())
            await clock.sleep_until(clock.now_ms() + 1_000)
            return 7

        value = await turn.step("charge", charge, effect="uncertain")
        return {"charged": int(value)}  # type: ignore[arg-type]

    @app.agent("echo")
    async def echo(turn: Turn) -> str:
        effects.hit("echo")
        return "echo"

    return app


async def _run(failing: str, agent: str) -> None:
    effects = Effects()
    clock = ManualClock()
    holder: list[SimulatedObject] = []
    app = _app(effects, clock, holder, failing, agent)
    async with SimulatedObject(app, clock=clock, check_alarm_invariant=True) as obj:
        holder.append(obj)
        charged = obj.admit("t-a", "charges", {})
        await obj.run_alarms(max_passes=50)
        assert len(holder) == 2
        failure = obj._storage_failures[0]
        assert failure.remaining == 0  # the write for t-b was refused once

        first = obj.submission(charged.id)
        assert first.state is SubmissionState.SETTLED, first.state
        assert first.outcome is Outcome.COMPLETED
        assert effects.count("charge") == 1
        assert all(report.phase != "failed" for report in obj.reports)
        (second,) = obj.submissions("t-b")
        if agent == "echo":
            assert second.outcome is Outcome.COMPLETED
            assert effects.count("echo") == 1
        else:  # parked once the refusal passed, and dormant
            assert second.state is SubmissionState.QUEUED
            assert [w[1] for w in obj.space.bindings.waits()] == [second.id]
        assert obj.alarm_at is None


@pytest.mark.parametrize(("failing", "agent"), [(CLAIM_SQL, "echo"), (PARK_SQL, "unregistered")])
def test_a_failed_dispatch_does_not_cancel_other_threads_attempts(
    failing: str, agent: str
) -> None:
    asyncio.run(_run(failing, agent))
