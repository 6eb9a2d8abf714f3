"""An admitted submission settles by the alarm alone, in one actionable pass."""

from __future__ import annotations

from pass_support import Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.scheduling import AlarmDecision
from threadline.storage import SqliteStorage
from threadline.threads.model import Outcome, SubmissionState


def test_pass_settles_an_admitted_submission_by_the_alarm_alone(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        first = await obj.run()  # the new object's first pass classifies (nothing to do)
        assert raw_storage.known_alarm() is None and len(first) == 1
        sub = obj.admit("t1", {"n": 1})
        reports = await obj.run()
        assert obj.get(sub.id).state is SubmissionState.SETTLED
        assert obj.get(sub.id).outcome is Outcome.COMPLETED
        assert [r.phase for r in reports] == [PassPhase.ACTIONABLE]
        report = reports[0]
        assert (report.settled, report.dispatched, report.nonterminal) == (1, 1, 0)
        assert report.alarm is AlarmDecision.CLEARED and report.alarm_at is None
        dirty, processed = obj.generation()
        assert processed == dirty  # the pass's own settlement did not dirty it again

    run(body())
