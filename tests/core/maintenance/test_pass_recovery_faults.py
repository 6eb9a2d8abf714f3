"""A Thread whose recovery is blocked gets a recovery fault and is skipped until its retry;
other Threads go on; a later successful recovery clears it; the host hears of both."""

from __future__ import annotations

from typing import Any

import pytest
from pass_support import CONFIG, Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.errors import Evicted
from threadline.maintenance.faults import RecoveryEvent
from threadline.storage import SqliteStorage
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.recovery import RecoveryBlocked, RecoverySweepResult


def test_pass_records_a_fault_skips_the_thread_and_clears_it_after_recovery(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        events: list[RecoveryEvent] = []

        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("echo")
            async def echo(turn: Any) -> Any:
                async def work() -> str:
                    return "done"

                return await turn.step("work", work)

            @app.on_recovery_event
            def hear(event: RecoveryEvent) -> None:
                events.append(event)

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        broken = obj.admit("bad", {})
        obj.failpoints.evict_at("step:started")
        with pytest.raises(Evicted):
            await obj.fire()
        await obj.evict()
        healthy = obj.admit("good", {})
        blocked = {"on": True}

        def install() -> None:
            recovery = obj.space.runtime.recovery
            original = recovery.run

            def run_recovery(thread_id: str) -> RecoverySweepResult:
                if thread_id == "bad" and blocked["on"]:
                    return RecoverySweepResult((), (RecoveryBlocked("bad", "decode", "KeyError"),))
                return original(thread_id)

            recovery.run = run_recovery  # type: ignore[method-assign]

        install()
        clock.advance(1_000)
        report = await obj.fire()
        assert obj.get(healthy.id).outcome is Outcome.COMPLETED  # other Threads go on
        assert obj.get(broken.id).state is SubmissionState.RUNNING
        faults = obj.space.faults.all()
        assert [f.thread_id for f in faults] == ["bad"] and faults[0].recipients == (broken.id,)
        assert report.recovered >= 1
        assert [e.kind for e in events] == ["created"]
        retry_at = faults[0].retry_at
        # Nothing retries the faulted Thread before its retry_at.
        assert raw_storage.known_alarm() == retry_at
        blocked["on"] = False
        await obj.run()
        assert obj.get(broken.id).outcome is Outcome.COMPLETED
        assert obj.space.faults.all() == []
        assert [e.kind for e in events] == ["created", "cleared"]
        assert raw_storage.known_alarm() is None

    run(body())


def test_a_pass_over_threads_with_no_fault_reads_the_faults_once() -> None:
    # Recovering or dispatching a Thread that has no fault touches no fault row: the pass's
    # one read of the fault deadlines already said there is none (a lost Attempt recovered
    # and run again, and fresh input dispatched, in one pass).
    app = Application(CONFIG)

    @app.agent("echo")
    async def echo(turn: Any) -> Any:
        async def work() -> str:
            return "done"

        return await turn.step("work", work)

    async def body() -> None:
        async with SimulatedObject(app, check_alarm_invariant=True) as obj:
            obj.admit("t-lost", "echo", {})
            obj.crash_at("step:started")
            # The Attempt is lost mid-step: the next pass recovers it before running it again.
            await obj.run_alarms(until=obj.clock.now_ms() + 1_000)
            assert obj.submissions()[0].state is SubmissionState.RUNNING
            storage = obj.storage
            real = storage.exec
            touched: list[str] = []

            def exec_(sql: str, *params: Any) -> Any:
                if "tl_recovery_faults" in sql:
                    touched.append(sql)
                return real(sql, *params)

            storage.exec = exec_  # type: ignore[method-assign]
            for n in range(3):
                obj.admit(f"t-{n}", "echo", n)
            reports = await obj.run_alarms()
            assert all(sub.outcome is Outcome.COMPLETED for sub in obj.submissions())
            assert sum(report.recovered for report in reports) == 1
            assert sum(report.dispatched for report in reports) == 4
            assert len(touched) == len(reports), touched

    run(body())
