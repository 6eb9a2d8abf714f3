"""The 14 pass failpoints are each reached, at their place in the pass."""

from __future__ import annotations

from typing import Any

import pytest
from pass_support import CONFIG, Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import Evicted, StorageError
from threadline.maintenance import PassPhase
from threadline.scheduling import MAINTENANCE_LOCATIONS
from threadline.storage import SqliteStorage
from threadline.threads.recovery import RecoveryBlocked, RecoverySweepResult

PASS_LOCATIONS = [
    location for location in MAINTENANCE_LOCATIONS
    if location.split(":")[1] in {"begin", "select", "binding-retry", "recovery-status",
                                  "retry", "checkpoint", "finish"}
]


def _make() -> Application:
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        async def work() -> str:
            return "done"

        return await turn.step("work", work)

    return app


def _record(obj: Obj) -> list[str]:
    arrivals: list[str] = []
    for location in PASS_LOCATIONS:
        obj.failpoints.install(location, arrivals.append)
    return arrivals


def _pairs(arrivals: list[str], name: str) -> list[int]:
    """Indexes of each before/after pair of ``name``, checked to be adjacent pairs in order."""
    before, after = f"maintenance:{name}:before", f"maintenance:{name}:after"
    marks = [(i, a) for i, a in enumerate(arrivals) if a in (before, after)]
    assert marks, f"{name} was never reached"
    for (i, first), (j, second) in zip(marks[::2], marks[1::2], strict=True):
        assert (first, second) == (before, after) and i < j
    return [i for i, a in marks]


def test_pass_reaches_each_failpoint_at_its_place(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    assert len(PASS_LOCATIONS) == 14

    async def body() -> None:
        obj = Obj(raw_storage, clock, _make)
        await obj.start()
        await obj.run()
        # A claim lost in an earlier incarnation (backlog recovery), a head whose agent is
        # not registered (binding wait), a Thread whose recovery is blocked (fault status).
        lost = obj.admit("a", {})
        obj.failpoints.evict_at("step:started")
        with pytest.raises(Evicted):
            await obj.fire()
        await obj.evict()
        obj.admit("b", {}, agent="missing")
        obj.admit("c", {})
        obj.admit("d", {})
        original = obj.space.runtime.recovery.run

        def blocked(thread_id: str) -> RecoverySweepResult:
            if thread_id == "d":
                return RecoverySweepResult((), (RecoveryBlocked("d", "decode", "KeyError"),))
            return original(thread_id)

        obj.space.runtime.recovery.run = blocked  # type: ignore[method-assign]
        arrivals = _record(obj)
        clock.advance(1_000)
        report = await obj.fire()
        assert report.phase is PassPhase.ACTIONABLE
        assert obj.get(lost.id).outcome is not None
        begin = _pairs(arrivals, "begin")
        select = _pairs(arrivals, "select")
        binding = _pairs(arrivals, "binding-retry")
        status = _pairs(arrivals, "recovery-status")
        checkpoint = _pairs(arrivals, "checkpoint")
        finish = _pairs(arrivals, "finish")
        assert begin == [0, 1]
        assert begin[-1] < select[0]
        assert select[0] < min(binding[0], status[0])
        assert max(binding[-1], status[-1], select[-1]) < checkpoint[0]
        assert checkpoint == [checkpoint[0], checkpoint[0] + 1] and checkpoint[1] < finish[0]
        assert finish == [len(arrivals) - 2, len(arrivals) - 1]
        assert "maintenance:retry:before" not in arrivals

        # A failing pass re-arms between its begin and its end, and does not finish.
        arrivals.clear()
        obj.admit("e", {})
        ledger = obj.space.runtime.ledger

        def fail() -> Any:
            raise StorageError("boom")

        ledger.live_threads = fail  # type: ignore[method-assign]
        clock.advance(10_000)
        failed = await obj.fire()
        assert failed.phase is PassPhase.FAILED
        assert arrivals == ["maintenance:begin:before", "maintenance:begin:after",
                            "maintenance:retry:before", "maintenance:retry:after"]

    run(body())


@pytest.mark.parametrize("location", PASS_LOCATIONS)
def test_pass_failpoint_loses_the_object_there_and_the_work_still_settles(
    location: str, raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, _make)
        await obj.start()
        await obj.run()
        obj.admit("b", {}, agent="missing")
        subs = [obj.admit(t, {}) for t in ("a", "c")]
        if location.startswith("maintenance:retry"):
            ledger = obj.space.runtime.ledger
            original = ledger.live_threads
            calls = [0]

            def fail_once() -> Any:
                calls[0] += 1
                if calls[0] == 1:
                    raise StorageError("boom")
                return original()

            ledger.live_threads = fail_once  # type: ignore[method-assign]
        if location.startswith("maintenance:recovery-status"):
            original_run = obj.space.runtime.recovery.run
            times = [0]

            def blocked_once(thread_id: str) -> RecoverySweepResult:
                if thread_id == "c" and times[0] == 0:
                    times[0] += 1
                    return RecoverySweepResult((), (RecoveryBlocked("c", "x", "KeyError"),))
                return original_run(thread_id)

            obj.space.runtime.recovery.run = blocked_once  # type: ignore[method-assign]
        obj.failpoints.evict_at(location)
        clock.advance(1_000)
        with pytest.raises(Evicted):
            await obj.run()
        await obj.evict()
        await obj.run()
        assert all(obj.get(s.id).outcome is not None for s in subs)
        assert raw_storage.known_alarm() is None

    run(body())
