"""A pass reads open work in full once: after backlog recovery and at the checkpoint it reads
again only the Threads it touched, with the faults and binding waits it recorded itself."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pass_support import Obj, echo_app, run

from threadline import Application
from threadline.clock import ManualClock
from threadline.maintenance import PassPhase
from threadline.scheduling import read_state
from threadline.storage import SqliteStorage
from threadline.testing import SimulatedObject
from threadline.threads import Turn
from threadline.threads.model import SubmissionState

app = Application()

#: The statements of a full scan of open work, and the due queue's earliest deadline.
FULL_SCAN = {
    "next due": "SELECT due_at FROM tl_lanes WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1",
    "faults": "SELECT thread_id, retry_at FROM tl_recovery_faults",
    "live": "SELECT DISTINCT thread_id FROM tl_submissions",
    "due timers": "SELECT thread_id FROM tl_waits WHERE state = 'open' AND wake_at <=",
    "binding waits": "SELECT submission_id FROM tl_binding_waits",
    "prune waits": "DELETE FROM tl_binding_waits",
    "clear retry": "UPDATE tl_maintenance SET retry_generation = NULL",
    "due lanes": "SELECT id, due_at, not_before, revision, stalls, state, reported, cursor"
                 " FROM tl_lanes WHERE due_at IS NOT NULL AND due_at <=",
}


@app.agent("sleeper")
async def sleeper(turn: Turn) -> object:
    assert isinstance(turn.input, dict)
    await turn.sleep(float(turn.input["s"]))
    return {"slept": turn.input["s"]}


def _count(obj: SimulatedObject, seen: Counter[str]) -> None:
    real = obj.storage.exec

    def exec_(sql: str, *params: Any) -> Any:
        for name, start in FULL_SCAN.items():
            if sql.lstrip().startswith(start):
                seen[name] += 1
        return real(sql, *params)

    obj.storage.exec = exec_  # type: ignore[method-assign]


async def _serve_one_due_timer() -> tuple[Counter[str], int]:
    async with SimulatedObject(app) as obj:
        for i in range(3):
            obj.admit(f"far-{i}", "sleeper", {"s": 86_400.0})
        sub = obj.admit("near", "sleeper", {"s": 1.0})
        await obj.run_alarms(until=obj.clock.now_ms() + 500)
        assert obj.submission(sub.id).state is SubmissionState.SUSPENDED
        due = obj.alarm_at
        assert due is not None
        seen: Counter[str] = Counter()
        _count(obj, seen)
        reports = await obj.run_alarms(until=due)
        assert obj.submission(sub.id).state is SubmissionState.SETTLED
        return seen, len(reports)


def test_serving_a_due_timer_scans_open_work_once() -> None:
    # The pass recovers the timer's Thread (backlog), runs its head and checkpoints: one full
    # scan, not one per phase.
    # The earliest due lane is read at the begin and for the final decision only: the pass's
    # own native work arms the empty slot at the pass's crash fallback without a read.
    seen, passes = asyncio.run(_serve_one_due_timer())
    assert passes == 1
    # With no binding wait read, the checkpoint has none to prune; with no native retry
    # recorded at the begin, the pass's progress has none to clear; with no other lane
    # enrolled meanwhile, the due lanes are read at the begin only. The faults and binding
    # waits were read by an earlier pass of this incarnation, which wrote none since.
    assert seen == Counter({name: 1 for name in FULL_SCAN}
                           | {"next due": 2, "prune waits": 0, "clear retry": 0,
                              "faults": 0, "binding waits": 0})


def test_a_pass_that_parks_a_head_certifies_its_generation_without_another_scan(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t", {}, agent="gone")  # no such agent in this deployment
        clock.advance(1_000)
        report = await obj.fire()
        assert report.phase is PassPhase.ACTIONABLE and report.dispatched == 1
        assert [w[0] for w in obj.space.bindings.waits()] == ["t"]
        # The parked head is a stable wait as the pass recorded it: no native retry owed.
        dirty, processed = obj.generation()
        assert processed == dirty
        assert read_state(raw_storage).retry is None

    run(body())


def test_a_thread_the_pass_put_to_sleep_is_not_counted_nonterminal() -> None:
    # A full scan would not read a Thread asleep on a timer that is not due; the pass that
    # ran it does not count it either, so the stored figure does not flip per unit of work.
    async def body() -> None:
        async with SimulatedObject(app) as obj:
            sub = obj.admit("near", "sleeper", {"s": 1.0})
            reports = await obj.run_alarms(until=obj.clock.now_ms() + 500)
            assert obj.submission(sub.id).state is SubmissionState.SUSPENDED
            assert reports[-1].nonterminal == 0
            assert read_state(obj.storage).nonterminal == 0

    asyncio.run(body())
