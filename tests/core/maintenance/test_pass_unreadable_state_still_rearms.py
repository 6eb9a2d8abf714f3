"""A pass that cannot read the object's own state (storage refusing the maintenance row for
every pass) still leaves an alarm: it re-arms the slot with a backoff kept in memory, growing
pass after pass, and the owed work runs once storage answers again."""

from __future__ import annotations

import asyncio

from pass_support import CONFIG, echo_app

from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState

# The generation record's read: every pass begins with it, and so does a failed pass's backoff.
STATE_READ = "FROM tl_maintenance WHERE id = 1"


async def _unreadable() -> None:
    async with SimulatedObject(echo_app(), clock=ManualClock(1_000_000)) as obj:
        await obj.run_alarms()
        owed = obj.admit("t1", "echo", {"n": 1}).id
        failure = obj.fail_statements(STATE_READ, times=8)
        gaps: list[int] = []
        for _ in range(4):
            fired = obj.alarm_at
            assert fired is not None  # owed work always has an alarm
            reports = await obj.run_alarms(until=fired)
            assert [report.phase for report in reports] == [PassPhase.FAILED]
            assert reports[0].failure_type == "StorageError"
            assert obj.alarm_at is not None
            gaps.append(obj.alarm_at - fired)
        # base * 2^stalls, jittered over [b/2, b]: each gap at least the last one's floor.
        base = CONFIG.alarm_backoff_base_ms
        assert [gap >= base * 2 ** i // 2 for i, gap in enumerate(gaps)] == [True] * 4
        assert gaps[3] > gaps[0]
        assert failure.remaining == 0
        await obj.run_alarms()
        assert obj.submission(owed).state is SubmissionState.SETTLED
        assert obj.alarm_at is None


def test_a_pass_that_cannot_read_its_own_state_still_rearms_with_a_backoff() -> None:
    asyncio.run(_unreadable())
