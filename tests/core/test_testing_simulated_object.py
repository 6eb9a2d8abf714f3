"""``threadline.testing.SimulatedObject``: how it delivers alarms, loses and rebuilds the object.

These tests replace ``Space.alarm`` with small scripted handlers, so they pin the simulator's
own mechanics (what the platform does around a handler), whatever the maintenance pass does.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from threadline import Application, ManualClock
from threadline.errors import Evicted, StorageError
from threadline.scheduling import NATIVE
from threadline.space import Space
from threadline.testing import (
    AlarmInvariantError,
    QuiescenceError,
    SimulatedObject,
)
from threadline.threads import Turn

START = 1_700_000_000_000
Handler = Callable[[Space], Coroutine[Any, Any, Any]]


@dataclass
class Seen:
    """What scripted handlers observed, one entry per run."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    running: int = 0


def app() -> Application:
    application = Application()

    @application.agent("echo")
    async def echo(turn: Turn) -> Any:
        return await turn.step("echo", lambda: {"got": turn.input})

    return application


def script(monkeypatch: pytest.MonkeyPatch, seen: Seen, body: Handler) -> None:
    """Make every ``Space.alarm`` run ``body``, recording the clock, the slot and overlap."""

    async def alarm(space: Space, retry_count: int = 0) -> Any:
        seen.running += 1
        assert seen.running == 1, "two handlers ran at once"
        seen.runs.append({"now": space.clock.now_ms(), "slot": space.storage.known_alarm()})
        try:
            return await body(space)
        finally:
            seen.running -= 1

    monkeypatch.setattr(Space, "alarm", alarm)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def test_alarms_fire_one_at_a_time_with_the_slot_emptied_and_time_skipped_forward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = Seen()
    # Each run arms the next deadline: later, then one already in the past, then nothing.
    plan = [START + 5_000, START + 1_000]

    async def handler(space: Space) -> str:
        if plan:
            space.storage.set_alarm(plan.pop(0))
        return f"pass {len(seen.runs)}"

    script(monkeypatch, seen, handler)

    async def scenario() -> None:
        async with SimulatedObject(app(), clock=ManualClock(START)) as obj:
            obj.storage.set_alarm(START + 60_000)
            reports = await obj.run_alarms()
            assert reports == ["pass 1", "pass 2", "pass 3"]
            assert obj.reports == reports
            assert obj.alarm_at is None

    run(scenario())
    # The slot was emptied before each handler; time jumped to each alarm and never back.
    assert [r["slot"] for r in seen.runs] == [None, None, None]
    assert [r["now"] for r in seen.runs] == [START + 60_000, START + 60_000, START + 60_000]


def test_until_stops_before_a_later_alarm_and_moves_the_clock_to_until(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = Seen()

    async def handler(space: Space) -> None:
        space.storage.set_alarm(space.clock.now_ms() + 10_000)

    script(monkeypatch, seen, handler)

    async def scenario() -> None:
        clock = ManualClock(START)
        async with SimulatedObject(app(), clock=clock) as obj:
            obj.storage.set_alarm(START + 1_000)
            await obj.run_alarms(until=START + 25_000)
            assert [r["now"] for r in seen.runs] == [START + 1_000, START + 11_000,
                                                    START + 21_000]
            assert clock.now_ms() == START + 25_000
            assert obj.alarm_at == START + 31_000

    run(scenario())


def test_an_object_that_never_quiesces_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = Seen()

    async def handler(space: Space) -> None:
        space.storage.set_alarm(space.clock.now_ms() + 500)

    script(monkeypatch, seen, handler)

    async def scenario() -> None:
        async with SimulatedObject(app(), clock=ManualClock(START)) as obj:
            obj.storage.set_alarm(START)
            with pytest.raises(QuiescenceError, match="did not quiesce: after 7 passes"):
                await obj.run_alarms(max_passes=7)

    run(scenario())
    assert len(seen.runs) == 7


def test_a_handler_waiting_on_the_clock_gets_time_skipped_to_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = Seen()

    async def handler(space: Space) -> int:
        await space.clock.sleep_until(space.clock.now_ms() + 7_000)
        return space.clock.now_ms()

    script(monkeypatch, seen, handler)

    async def scenario() -> None:
        async with SimulatedObject(app(), clock=ManualClock(START)) as obj:
            obj.storage.set_alarm(START + 1_000)
            assert await obj.run_alarms() == [START + 8_000]

    run(scenario())


def test_a_crash_in_a_handler_restarts_the_object_and_the_alarms_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = Seen()
    wrote_after_eviction: list[bool] = []

    async def straggler(space: Space, release: asyncio.Event) -> None:
        await release.wait()
        space.storage.exec("UPDATE tl_maintenance SET nonterminal = 99 WHERE id = 1")
        wrote_after_eviction.append(True)

    release = asyncio.Event()

    async def handler(space: Space) -> str:
        # A crash fallback committed (as a lane claim does), work the handler started and
        # left running, then a failpoint where the object is lost.
        if len(seen.runs) == 1:
            space.scheduler.gate.schedule(NATIVE, space.clock.now_ms() + 3_000)
            asyncio.get_running_loop().create_task(straggler(space, release))
        await space.scheduler.failpoints.reached("maintenance:begin:before")
        # Only the second incarnation gets here: it finishes the native work.
        space.scheduler.due_queue.checkpoint_native(None)
        space.scheduler.alarm.decide()
        return "done"

    script(monkeypatch, seen, handler)

    async def scenario() -> None:
        async with SimulatedObject(app(), clock=ManualClock(START)) as obj:
            obj.space.scheduler.gate.schedule(NATIVE, START + 2_000)
            first_storage = obj.storage
            crash = obj.crash_at("maintenance:begin:before")
            reports = await obj.run_alarms()
            release.set()
            await asyncio.sleep(0)
            assert crash.fired and crash.arrivals == 1
            assert obj.evictions == 1 and obj.incarnation == 2
            assert obj.storage is not first_storage
            # The fallback alarm fired in the new incarnation, whose handler finished.
            assert reports == ["done"]
            assert len(seen.runs) == 2
            assert obj.alarm_at is None
            row = obj.storage.exec("SELECT nonterminal FROM tl_maintenance").one()
            assert row["nonterminal"] == 0

    run(scenario())
    assert wrote_after_eviction == []  # the lost incarnation's task was cancelled


def test_crash_at_counts_arrivals_and_fires_once() -> None:
    async def scenario() -> None:
        async with SimulatedObject(app(), clock=ManualClock(START)) as obj:
            crash = obj.crash_at("maintenance:dirty:after", occurrence=2)
            first = obj.admit("t", "echo", 1)
            with pytest.raises(Evicted):
                obj.admit("t", "echo", 2)
            assert crash.fired and crash.arrivals == 2
            await obj.evict()
            # dirty:after follows the commit: both admissions survived the loss.
            assert [s.input for s in obj.submissions("t")] == [1, 2]
            obj.admit("t", "echo", 3)  # fired once: no second crash
            assert obj.submission(first.id).id == first.id
            with pytest.raises(ValueError, match="unknown failpoint"):
                obj.crash_at("nowhere")

    run(scenario())


def test_evict_rebuilds_from_the_file_and_ids_are_deterministic(tmp_path: Path) -> None:
    async def admitted(seed: int, path: Path) -> list[str]:
        async with SimulatedObject(app(), path=path, clock=ManualClock(START), seed=seed) as obj:
            ids = [obj.admit("t", "echo", n).id for n in range(2)]
            space = obj.space
            await obj.evict()
            assert obj.space is not space
            assert [s.id for s in obj.submissions()] == ids
            ids.append(obj.admit("t", "echo", 2).id)
            assert len(set(ids)) == 3  # a new incarnation never reuses an id
            return ids

    same_a = run(admitted(7, tmp_path / "a.sqlite3"))
    same_b = run(admitted(7, tmp_path / "b.sqlite3"))
    other = run(admitted(8, tmp_path / "c.sqlite3"))
    assert same_a == same_b
    assert set(other).isdisjoint(same_a)
    assert (tmp_path / "a.sqlite3").exists()  # a given file is kept


def test_a_temporary_database_is_removed_on_close() -> None:
    async def scenario() -> Path:
        async with SimulatedObject(app()) as obj:
            path = Path(obj.path)
            assert path.exists()
        return path

    assert not run(scenario()).exists()


def test_the_alarm_invariant_check_catches_due_work_without_an_alarm() -> None:
    async def scenario() -> None:
        async with SimulatedObject(app(), clock=ManualClock(START)) as obj:
            obj.space.scheduler.gate.ensure_alarm()
            obj.check_alarm_invariant = True
            obj.admit("t", "echo", 1)  # through the gate: the alarm commits with it
            queue = obj.space.scheduler.due_queue
            with pytest.raises(AlarmInvariantError, match="due"):
                obj.storage.transaction(lambda: (queue.enroll("probe.lane", START - 1),
                                                 obj.storage.delete_alarm()))

    run(scenario())


def test_importing_the_kit_never_loads_the_platform() -> None:
    code = (
        "import sys, threadline.testing;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('workers', 'js', 'pyodide')];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_waits_hits_and_redeploy_across_incarnations() -> None:
    def reviewed_app(version: str) -> Application:
        application = Application()

        @application.agent("review", version=version)
        async def review(turn: Turn) -> Any:
            decision = await turn.approval("ok", {"draft": turn.input})
            return {"approved": decision.approved}

        return application

    async def scenario() -> None:
        async with SimulatedObject(reviewed_app("1"), clock=ManualClock(START)) as obj:
            sub = obj.admit("t", "review", "text")
            await obj.runtime.process_thread_head("t")  # the runtime, driven directly
            waits = obj.waits(sub.id)
            assert [(w.kind, w.key, w.payload) for w in waits] == [
                ("approval", "ok", {"draft": "text"})
            ]
            claimed = obj.hits("attempt:claimed")
            assert claimed == 1
            new_app = reviewed_app("2")
            await obj.redeploy(new_app)
            assert obj.app is new_app and obj.space.app is new_app and obj.incarnation == 2
            obj.approve(sub.id, "ok")
            assert obj.waits(sub.id) == []
            settled = await obj.runtime.process_thread_head("t")
            assert settled is not None and settled.result == {"approved": True}
            assert obj.hits("attempt:claimed") == claimed + 1  # summed over incarnations

    run(scenario())


def test_with_the_real_pass_a_crash_mid_attempt_restarts_and_settles_once() -> None:
    async def scenario() -> None:
        async with SimulatedObject(app(), clock=ManualClock(START), seed=3,
                                   check_alarm_invariant=True) as obj:
            sub = obj.admit("t", "echo", "hi")
            crash = obj.crash_at("settle:before")
            reports = await obj.run_alarms()
            assert crash.fired and obj.evictions == 1
            done = obj.submission(sub.id)
            assert done.state == "settled" and done.result == {"got": "hi"}
            assert done.attempts == 2  # the lost Attempt, then the one that settled
            assert [r.settled for r in reports].count(1) == 1
            assert obj.reports[-len(reports):] == reports
            assert obj.alarm_at is None

    run(scenario())


def test_failed_statements_roll_back_and_are_counted_across_incarnations() -> None:
    async def scenario() -> None:
        async with SimulatedObject(app(), clock=ManualClock(START)) as obj:
            failure = obj.fail_statements("INSERT INTO tl_submissions", times=2)
            with pytest.raises(StorageError, match="injected"):
                obj.admit("t", "echo", 1)
            await obj.evict()
            with pytest.raises(StorageError):
                obj.admit("t", "echo", 1)
            assert failure.remaining == 0
            assert obj.submissions() == []  # each admission rolled back whole
            obj.admit("t", "echo", 1)
            assert [s.input for s in obj.submissions()] == [1]

    run(scenario())
