"""The native retry a pass's checkpoint writes is not ended by the same pass's finish.

Native work that is owed and makes no progress is backed off at the checkpoint (a retry
record, ``base * 2^stalls``). A lane wave running concurrently may end after that retry's
``not_before``; the finish, which ends only a retry left by earlier failures, must not take
the fresh one for stale and drop it. Otherwise the stalls restart from 0 at every other pass
and owed native work that keeps failing never backs off beyond the base while a slow lane runs.
"""

from __future__ import annotations

import asyncio
from itertools import pairwise

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.scheduling import read_state
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState

CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)
LANE = "probe.slow"
#: How long each wave of the slow lane takes (longer than the first few retries).
WAVE_MS = 20_000


def _app() -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: object) -> str:
        return "echo"

    return app


async def _stalls_per_actionable_pass(passes: int) -> tuple[list[int | None], list[int]]:
    clock = ManualClock()
    async with SimulatedObject(_app(), clock=clock) as obj:

        async def slow(now: int, deadline: int) -> int | None:
            await clock.sleep_until(now + WAVE_MS)
            return clock.now_ms()  # more to do: due again at once

        obj.space.lanes.register(LANE, slow, dispatch_timeout_ms=WAVE_MS + 1_000)
        runtime = obj.space.runtime

        async def stuck(thread_id: str, *, yield_after: int | None = None) -> None:
            return None  # every dispatch makes no progress (its claim lost, say)

        runtime.process_thread_head = stuck  # type: ignore[assignment,method-assign]
        submission = obj.admit("t", "echo", {})
        obj.space.scheduler.gate.schedule(LANE, clock.now_ms())
        stalls: list[int | None] = []
        starts: list[int] = []
        while len(stalls) < passes:
            slot = obj.alarm_at
            assert slot is not None
            (report,) = await obj.run_alarms(until=slot)
            if report.phase == "actionable":
                retry = read_state(obj.storage).pending_retry
                stalls.append(None if retry is None else retry.stalls)
                starts.append(report.started_at)
        assert obj.submission(submission.id).state is SubmissionState.QUEUED
    return stalls, starts


def test_owed_native_work_keeps_backing_off_while_a_slow_lane_outlasts_its_retry() -> None:
    stalls, starts = asyncio.run(_stalls_per_actionable_pass(10))
    # Every actionable pass leaves its retry, one stall more than the last (before, every
    # other pass dropped it: 1, None, 1, None, ...).
    assert stalls == list(range(1, 11)), stalls
    gaps = [later - earlier for earlier, later in pairwise(starts)]
    # Once the retry outgrows a wave, native work waits for it: the gaps keep growing
    # (20.5 s while a wave is the longer wait, then 41 s, 111 s, 247 s here).
    assert gaps[-1] >= (CONFIG.alarm_backoff_base_ms << 8) // 2, gaps
    assert gaps == sorted(gaps), gaps
