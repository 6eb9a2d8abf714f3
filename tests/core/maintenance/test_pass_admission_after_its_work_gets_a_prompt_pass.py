"""The prompt-pass hint is never lost: input admitted after a pass's end of work (during its
last waves, just before its final decision, or even after it) gets the next pass at once,
as it would between passes, not the 500 ms minimum delay. The hint is spent by the pass it
arrived in, so it cannot make the alarm spin."""

from __future__ import annotations

import pytest
from pass_support import CONFIG, Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.maintenance.pass_state import CHECKPOINT_AFTER, FINISH_AFTER, FINISH_BEFORE
from threadline.scheduling import AlarmDecision
from threadline.storage import SqliteStorage
from threadline.threads.model import Submission, SubmissionState


@pytest.mark.parametrize("where", [CHECKPOINT_AFTER, FINISH_BEFORE, FINISH_AFTER])
def test_an_admission_after_the_pass_work_gets_a_prompt_pass(
    raw_storage: SqliteStorage, clock: ManualClock, where: str
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        first = obj.admit("t1", {"n": 1})
        late: list[Submission] = []

        def arrive(location: str) -> None:
            obj.failpoints.clear(location)
            # What the submit route does: admit, then ask for a prompt pass.
            late.append(obj.admit("t2", {"n": 2}))
            obj.space.api.wake()

        obj.failpoints.install(where, arrive)
        slot = raw_storage.known_alarm()
        assert slot is not None
        clock.set(slot)
        report = await obj.fire()
        assert obj.get(first.id).state is SubmissionState.SETTLED and late
        # The next pass is due now, not a minimum delay away (after the final decision, the
        # hint is armed as the pass ends).
        assert report.alarm is (AlarmDecision.CLEARED if where == FINISH_AFTER
                                else AlarmDecision.REARMED)
        assert raw_storage.known_alarm() == clock.now_ms()

        # That pass serves the late input; the hint was spent, so the object then rests.
        at = clock.now_ms()
        reports = await obj.run()
        assert [report.started_at for report in reports] == [at]
        assert obj.get(late[0].id).state is SubmissionState.SETTLED
        assert raw_storage.known_alarm() is None

    run(body())


def test_a_hint_during_a_pass_never_arms_earlier_than_the_work_is_due(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    """Prompt means ``max(now, earliest due)``, as between passes: a hint with nothing due
    now leaves the next pass at the earliest due lane."""

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", {"n": 1})
        later = clock.now_ms() + 60_000

        async def idle(now: int, deadline: int) -> int | None:
            return None

        obj.space.lanes.register("host.lane", idle, dispatch_timeout_ms=1_000)

        def hint(location: str) -> None:
            obj.failpoints.clear(location)
            obj.space.scheduler.gate.schedule("host.lane", later)
            obj.space.api.wake()

        obj.failpoints.install(FINISH_BEFORE, hint)
        slot = raw_storage.known_alarm()
        assert slot is not None
        clock.set(slot)
        await obj.fire()
        assert raw_storage.known_alarm() == later
        assert later - clock.now_ms() > CONFIG.min_alarm_delay_ms

    run(body())
