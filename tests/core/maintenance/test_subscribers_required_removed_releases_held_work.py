"""Removing or relaxing a required subscriber releases what it held: a deploy that removes a
parked required subscriber, or makes it optional, lets the submissions it held run at its
start, and the alarm-invariant checker calls such held work with no alarm owed work."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from subscribers_support import CONFIG, Recorder, clock, emit, writer_app

from threadline import Application, DeliveryRefused
from threadline.testing import SimulatedObject
from threadline.testing.alarm_invariants import alarm_invariant_problem
from threadline.threads.model import SubmissionState

DAY_MS = 86_400_000


def _parked_on(thread: str) -> Recorder:
    got = Recorder()
    got.fail = lambda batch: (DeliveryRefused("audit store refused")
                              if any(r.thread_id == thread for r in batch) else None)
    return got


def _removed() -> Application:
    return writer_app(CONFIG)


def _relaxed() -> Application:
    app = writer_app(CONFIG)
    app.subscriber("audit")(Recorder())
    return app


async def _held_then_released(after: Callable[[], Application]) -> None:
    app = writer_app(CONFIG)
    app.subscriber("audit", required=True)(_parked_on("a"))
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        emit(obj, "a", ("note", 1))
        held = emit(obj, "a", ("note", 2))
        await obj.run_alarms()
        assert obj.submission(held).state is SubmissionState.QUEUED
        assert obj.alarm_at is None
        # What the checker says of that storage under the new deployment, before its start.
        problem = alarm_invariant_problem(obj.storage, after(), obj.clock.now_ms())
        assert problem is not None and "owes native work" in problem and "'a'" in problem, problem
        await obj.redeploy(after())
        await obj.run_alarms()
        obj.clock.advance(DAY_MS)
        await obj.evict()
        await obj.run_alarms()
        assert obj.submission(held).state is SubmissionState.SETTLED
        assert obj.alarm_at is None


@pytest.mark.parametrize("after", [_removed, _relaxed], ids=["removed", "made-optional"])
def test_a_deploy_removing_or_relaxing_a_parked_required_subscriber_releases_its_held_work(
    after: Callable[[], Application],
) -> None:
    asyncio.run(_held_then_released(after))
