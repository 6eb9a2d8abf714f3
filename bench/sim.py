"""Scenarios 1, 2, 5, 7 and 8 under CPython, on ``threadline.testing.SimulatedObject``.

The storage is sqlite3, whose meter is approximate (rows returned and rows changed, no index
entries), hence the label "sqlite3 approximation". Time is a manual clock: wall time is the
real time the pass took on this machine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from bench_app import PULSE_EVERY, PULSE_THREAD, app, schedule_app
from bench_meter import Cost, StatementLog

from bench.model import (
    FIRE_NOTHING,
    FIRE_RUN,
    FIRE_SUBMIT,
    SIM,
    Measurement,
    ScenarioError,
    fire_case,
)
from threadline.maintenance import PassPhase
from threadline.testing import SimulatedObject
from threadline.threads.model import ScheduledSubmission, SubmissionState

#: A timer that stays pending for the whole benchmark (one day).
FAR_MS = 86_400_000
#: The timer that falls due.
NEAR_MS = 1_000


def _figures(cost: Cost, wall_s: float, alarms: int) -> dict[str, float]:
    return {
        "rows_read": cost.rows_read,
        "rows_written": cost.rows_written,
        "statements": cost.statements,
        "set_alarm": cost.set_alarm,
        "delete_alarm": cost.delete_alarm,
        "alarms": alarms,
        "wall_ms": round(wall_s * 1000, 3),
    }


async def _settle_all(obj: SimulatedObject) -> None:
    await obj.run_alarms(max_passes=100_000)


def _admit_many(obj: SimulatedObject, n: int, agent: str, input: Any, prefix: str) -> None:
    # One Thread per submission: a Thread runs its submissions one after the other, and the
    # scenarios want independent ones.
    def admit() -> None:
        for i in range(n):
            obj.admit(f"{prefix}-{i}", agent, input)

    obj.storage.transaction(admit)


async def caught_up(settled: int, runs: int, explain: bool = False) -> Measurement:
    """Scenario 1: a pass that finds nothing owed, with ``settled`` settled submissions."""
    m = Measurement("1", SIM, f"settled={settled:,}")
    async with SimulatedObject(app) as obj:
        _admit_many(obj, settled, "unit", {"n": 1}, "history")
        await _settle_all(obj)
        log = StatementLog(obj.storage)
        for _ in range(runs):
            obj.clock.advance(1_000)
            obj.storage.set_alarm(obj.clock.now_ms())  # an early or stale alarm
            with log.measure() as cost:
                started = time.perf_counter()
                reports = await obj.run_alarms()
                wall = time.perf_counter() - started
            if len(reports) != 1 or reports[0].phase is not PassPhase.CAUGHT_UP:
                raise ScenarioError(f"expected one caught-up pass, got {reports!r}")
            m.runs.append(_figures(cost, wall, len(reports)))
            if explain and m.explain is None:
                m.explain = cost.as_dict(explain=True)["by_statement"]
    return m


async def one_submission(runs: int, explain: bool) -> list[Measurement]:
    """Scenario 2: one simple submission, admission then execution by the alarm."""
    admission = Measurement("2", SIM, "admission")
    execution = Measurement("2", SIM, "execution")
    total = Measurement("2", SIM, "end to end")
    async with SimulatedObject(app) as obj:
        log = StatementLog(obj.storage)
        # One unmeasured submission first, as in workerd.
        obj.admit("warm-up", "unit", {})
        await obj.run_alarms()
        for run in range(runs):
            with log.measure() as admit_cost:
                started = time.perf_counter()
                sub = obj.admit(f"unit-{run}", "unit", {"n": run})
                admit_wall = time.perf_counter() - started
            with log.measure() as exec_cost:
                started = time.perf_counter()
                reports = await obj.run_alarms()
                exec_wall = time.perf_counter() - started
            if obj.submission(sub.id).state is not SubmissionState.SETTLED:
                raise ScenarioError(f"submission {sub.id} did not settle")
            admission.runs.append(_figures(admit_cost, admit_wall, 0))
            execution.runs.append(_figures(exec_cost, exec_wall, len(reports)))
            both = _sum(admission.runs[-1], execution.runs[-1])
            total.runs.append(both)
            if explain and run == 0:
                admission.explain = admit_cost.as_dict(explain=True)["by_statement"]
                execution.explain = exec_cost.as_dict(explain=True)["by_statement"]
    return [admission, execution, total]


def _sum(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {key: round(a[key] + b[key], 3) for key in a}


async def pending_timers(k: int, runs: int, explain: bool = False) -> Measurement:
    """Scenario 5: ``k`` durable timers pending, one falls due; cost of the alarm serving it."""
    m = Measurement("5", SIM, f"K={k:,}")
    async with SimulatedObject(app) as obj:
        _admit_many(obj, k, "sleeper", {"ms": FAR_MS}, "far")
        await obj.run_alarms(until=obj.clock.now_ms() + FAR_MS // 2, max_passes=100_000)
        log = StatementLog(obj.storage)
        for run in range(runs):
            sub = obj.admit(f"near-{run}", "sleeper", {"ms": NEAR_MS})
            # Dispatch it: the Attempt suspends on its timer (not measured).
            await obj.run_alarms(until=obj.clock.now_ms() + NEAR_MS // 2)
            due = obj.alarm_at
            if due is None or obj.submission(sub.id).state is SubmissionState.SETTLED:
                raise ScenarioError("the near timer is not pending")
            with log.measure() as cost:
                started = time.perf_counter()
                reports = await obj.run_alarms(until=due)
                wall = time.perf_counter() - started
            if obj.submission(sub.id).state is not SubmissionState.SETTLED:
                raise ScenarioError(f"the due timer of {sub.id} was not served")
            pending = _pending_timers(obj)
            if pending != k:
                raise ScenarioError(f"{pending} timers pending, expected {k}")
            m.runs.append(_figures(cost, wall, len(reports)))
            if explain and run == 0:
                m.explain = cost.as_dict(explain=True)["by_statement"]
    return m


async def pending_delayed(
    k: int, runs: int, explain: bool = False, *, whole: bool = False
) -> list[Measurement]:
    """Scenario 7: ``k`` delayed submissions pending, one falls due; cost of the alarm that
    admits it into its Thread's FIFO. With ``whole``, also what one delayed submission costs
    from its admission (the POST's work) to its settlement: the admission, the alarm that
    admits it, and the alarm(s) that run it (``execution``)."""
    m = Measurement("7", SIM, f"K={k:,}")
    admission = Measurement("7", SIM, "admission")
    execution = Measurement("7", SIM, "execution")
    total = Measurement("7", SIM, "end to end")
    async with SimulatedObject(app) as obj:
        far = obj.clock.now_ms() + FAR_MS

        def schedule() -> None:
            for i in range(k):
                obj.admit(f"far-{i}", "unit", {"n": i}, not_before=far)

        obj.storage.transaction(schedule)
        # A new object's first pass (it starts dirty), not measured.
        await obj.run_alarms(until=obj.clock.now_ms() + NEAR_MS // 2)
        log = StatementLog(obj.storage)
        for run in range(runs):
            with log.measure() as admit_cost:
                started = time.perf_counter()
                sub = obj.admit(f"near-{run}", "unit", {"n": run},
                                not_before=obj.clock.now_ms() + NEAR_MS)
                admit_wall = time.perf_counter() - started
            due = obj.alarm_at
            if not isinstance(sub, ScheduledSubmission) or due != sub.not_before:
                raise ScenarioError(f"the near submission is not scheduled for its time: {sub}")
            with log.measure() as cost:
                started = time.perf_counter()
                reports = await obj.run_alarms(until=due)
                wall = time.perf_counter() - started
            if len(reports) != 1 or isinstance(obj.find(sub.id), ScheduledSubmission):
                raise ScenarioError(f"one alarm should admit {sub.id}: {reports!r}")
            with log.measure() as exec_cost:
                started = time.perf_counter()
                ran = await obj.run_alarms(until=obj.clock.now_ms() + NEAR_MS // 2)
                exec_wall = time.perf_counter() - started
            if obj.submission(sub.id).state is not SubmissionState.SETTLED:
                raise ScenarioError(f"{sub.id} was admitted but did not run")
            waiting = _pending_delayed(obj)
            if waiting != k:
                raise ScenarioError(f"{waiting} delayed submissions pending, expected {k}")
            m.runs.append(_figures(cost, wall, len(reports)))
            admission.runs.append(_figures(admit_cost, admit_wall, 0))
            execution.runs.append(_figures(exec_cost, exec_wall, len(ran)))
            total.runs.append(_sum(_sum(admission.runs[-1], m.runs[-1]), execution.runs[-1]))
            if explain and run == 0:
                m.explain = cost.as_dict(explain=True)["by_statement"]
    return [m, admission, execution, total] if whole else [m]


_PULSE = "SELECT next_fire, last_fire FROM tl_schedules WHERE id = 'pulse'"


async def schedule_fires(
    schedules: int, submit: bool, runs: int, explain: bool = False
) -> list[Measurement]:
    """Scenario 8: ``schedules`` schedules declared, only ``pulse`` due; cost of the alarm that
    runs one fire of it (its function does nothing, or with ``submit`` submits once), and with
    ``submit`` of the next alarm, which runs that submission."""
    fire = Measurement("8", SIM, fire_case(schedules, FIRE_SUBMIT if submit else FIRE_NOTHING))
    ran = Measurement("8", SIM, fire_case(schedules, FIRE_RUN))
    interval = int(PULSE_EVERY.total_seconds() * 1000)
    async with SimulatedObject(schedule_app(schedules, submit)) as obj:
        log = StatementLog(obj.storage)
        alarms = _meter_alarms(obj, log)
        # A new object's start and first fire (its first lanes, the agent's first rows) are not
        # measured.
        await obj.run_alarms(until=_pulse(log)[0] + interval // 2)
        for run in range(runs):
            due, _ = _pulse(log)
            if obj.alarm_at != due:
                raise ScenarioError(f"the alarm is at {obj.alarm_at}, the next fire at {due}")
            alarms.clear()
            reports = await obj.run_alarms(until=due + interval // 2)
            if _pulse(log)[1] != due:
                raise ScenarioError(f"the fire of {due} did not complete: {reports!r}")
            if len(alarms) != (2 if submit else 1):
                raise ScenarioError(f"{len(alarms)} alarms for one fire: {reports!r}")
            fire.runs.append(_figures(alarms[0][0], alarms[0][1], 1))
            if submit:
                states = [sub.state for sub in obj.submissions(PULSE_THREAD)]
                if reports[1].settled != 1 or states != [SubmissionState.SETTLED] * (run + 2):
                    raise ScenarioError(f"the fire's submission did not run next: {reports!r}")
                ran.runs.append(_figures(alarms[1][0], alarms[1][1], 1))
            if explain and run == 0:
                fire.explain = alarms[0][0].as_dict(explain=True)["by_statement"]
                if submit:
                    ran.explain = alarms[1][0].as_dict(explain=True)["by_statement"]
    return [fire, ran] if submit else [fire]


def _pulse(log: StatementLog) -> tuple[int, int | None]:
    """``pulse``'s next fire time and last fire (read outside any measurement)."""
    row = log.unmetered_exec(_PULSE).one()
    return int(row["next_fire"]), None if row["last_fire"] is None else int(row["last_fire"])


def _meter_alarms(obj: SimulatedObject, log: StatementLog) -> list[tuple[Cost, float]]:
    """Meter each alarm handler run of ``obj`` on its own, as the bench object does in workerd:
    the list returned gets the cost and wall time of each, in order."""
    alarms: list[tuple[Cost, float]] = []
    handler = obj.space.alarm

    async def metered(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        with log.measure() as cost:
            try:
                return await handler(*args, **kwargs)
            finally:
                alarms.append((cost, time.perf_counter() - started))

    obj.space.alarm = metered  # type: ignore[method-assign]
    return alarms


def _pending_delayed(obj: SimulatedObject) -> int:
    return int(obj.storage.exec("SELECT COUNT(*) AS n FROM tl_delayed").one()["n"])


def _pending_timers(obj: SimulatedObject) -> int:
    row = obj.storage.exec(
        "SELECT COUNT(*) AS n FROM tl_waits WHERE state = 'open' AND kind = 'timer'"
    ).one()
    return int(row["n"])


def _subscriber_app() -> Any:
    """Scenario 2's agent, with a callable subscriber and a required one."""
    from bench_app import subscriber_app

    return subscriber_app()


async def subscriber_batches(runs: int, explain: bool = False) -> list[Measurement]:
    """Scenario 9: rows written per delivered batch, per subscriber (5 submissions on 5
    Threads per run, each emitting one record)."""
    from bench_app import SUBSCRIBER_NAMES

    names = SUBSCRIBER_NAMES
    out = {name: Measurement("9", SIM, f"{name}: rows written per delivered batch")
           for name in names}
    async with SimulatedObject(_subscriber_app()) as obj:
        log = StatementLog(obj.storage)
        obj.admit("warm-up", "unit", {})
        await obj.run_alarms()
        publication = obj.space.publication
        for run in range(runs):
            before = dict(publication.batches)
            _admit_many(obj, 5, "unit", {"n": run}, f"sub-{run}")
            with log.measure() as cost:
                await obj.run_alarms()
            # The cursor rows: each subscriber's compare-and-set, one per batch delivered.
            cursor_rows = sum(written for sql, (_, _, written) in cost.by_statement.items()
                              if sql.startswith("UPDATE tl_subscribers SET cursor"))
            # What delivering read: the log's pages past the cursors and the cursor rows.
            delivery_reads = sum(
                read for sql, (_, read, _) in cost.by_statement.items()
                if sql.startswith(("UPDATE tl_subscribers SET cursor", "SELECT pos, thread_id"))
            )
            batches = {name: publication.batches.get(name, 0) - before.get(name, 0)
                       for name in names}
            if not all(batches.values()):
                raise ScenarioError(f"a subscriber got no batch: {batches}")
            per_name = {name: publication.cursor_writes.get(name, 0) for name in names}
            for name in names:
                out[name].runs.append({
                    "rows_read": delivery_reads / sum(batches.values()),
                    "rows_written": cursor_rows / sum(batches.values()),
                    "batches": batches[name],
                    "cursor_writes_total": per_name[name],
                })
    return list(out.values())


def run_sync(factory: Callable[[], Any]) -> Any:
    """Run one scenario coroutine on a fresh event loop."""
    return asyncio.run(factory())
