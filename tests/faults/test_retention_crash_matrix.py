"""Crash matrix of retention: a retention wave lost at every one of its failpoints, then the
alarm alone finishes the work.

The scenario (seeded): two Threads chatting for weeks under a 30-day retention with a
subscriber that first falls behind (it fails its first deliveries), and a third Thread whose
submission waits on an approval all along; the clock then runs far past the retention while
the object's alarms fire. A dry run counts each failpoint's arrivals; each case crashes at the
first, second, middle and last arrival (``Evicted``), the simulated platform restarts the
object, and the alarm goes on. Every run must keep these invariants:

* nothing still retained is lost: each Thread keeps exactly the suffix of its log the dry run
  keeps (the deletion is a prefix, the same whatever the crash), with no hole, and every record
  younger than the retention is there;
* nothing was delivered out of order, nor missed: the subscriber got every record of every
  Thread, its first deliveries in seq order per Thread, and its cursor ends at the log's end;
* a submission goes with its settlement record: every kept submission that settled has its
  records, no journal or wait row outlives its submission;
* the waiting submission kept its records, and decided afterwards, it completes;
* the alarm invariant held after every commit (retention's lane never idle).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from threadline import Application, ManualClock, Record, RuntimeConfig, Turn
from threadline.scheduling import RETENTION_LOCATIONS
from threadline.testing import SimulatedObject

START = 1_700_000_000_000
DAY_MS = 86_400_000
SEEDS = (0, 1)
CONFIG = RuntimeConfig(alarm_backoff_base_ms=100, alarm_backoff_cap_ms=2_000,
                       retention_ms=30 * DAY_MS)


@dataclass
class World:
    """What survives every eviction: what the subscriber was given, and its failures left."""

    delivered: list[tuple[str, int]] = field(default_factory=list)
    failures_left: int = 3


def build_app(world: World) -> Application:
    app = Application(CONFIG)

    @app.agent("chat")
    async def chat(turn: Turn) -> Any:
        reply = await turn.step("reply", lambda: {"text": "ok"})
        await turn.emit({"role": "assistant", "text": reply["text"]})
        return {"ok": True}

    @app.agent("approve")
    async def approve(turn: Turn) -> Any:
        await turn.emit({"asked": True})
        decision = await turn.approval("go")
        return {"approved": decision.approved}

    @app.subscriber("audit", batch=7)
    async def audit(batch: list[Record]) -> None:
        if world.failures_left:
            world.failures_left -= 1
            raise RuntimeError("audit store unavailable")
        world.delivered.extend((record.thread_id, record.seq) for record in batch)

    return app


@dataclass
class Run:
    obj: SimulatedObject
    world: World
    waiting: str
    cutoff: int

    def close(self) -> None:
        self.obj.close()


async def play(seed: int, crash: tuple[str, int] | None) -> Run:
    world = World()
    obj = SimulatedObject(build_app(world), clock=ManualClock(START), seed=seed,
                          check_alarm_invariant=True)
    await obj.start()
    if crash is not None:
        obj.crash_at(*crash)
    waiting = obj.admit("w", "approve", {}).id
    turns = 3 + seed
    for _ in range(45):
        for thread in ("a", "b"):
            for _ in range(turns):
                obj.admit(thread, "chat", {"text": "hi"})
        await obj.run_alarms(until=obj.clock.now_ms() + 60_000)
        obj.clock.advance(DAY_MS)
    # Far past the retention: hourly waves delete what has expired, in bounded transactions.
    for _ in range(30):
        obj.clock.advance(3_600_000)
        await obj.run_alarms(until=obj.clock.now_ms())
    return Run(obj, world, waiting, obj.clock.now_ms() - CONFIG.retention_ms)  # type: ignore[operator]


def kept(obj: SimulatedObject) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for row in obj.storage.exec("SELECT thread_id, seq FROM tl_history ORDER BY thread_id, seq"):
        out.setdefault(str(row["thread_id"]), []).append(int(row["seq"]))
    return out


def last_seqs(obj: SimulatedObject) -> dict[str, int]:
    return {thread: seqs[-1] for thread, seqs in kept(obj).items()}


def _span(seqs: list[int] | None) -> str:
    return "nothing" if not seqs else f"{seqs[0]}..{seqs[-1]} ({len(seqs)})"


def check(run: Run, expected: dict[str, list[int]] | None) -> list[str]:
    obj, problems = run.obj, []
    now_kept = kept(obj)
    for thread, seqs in now_kept.items():
        if seqs != list(range(seqs[0], seqs[-1] + 1)):
            problems.append(f"thread {thread}: a hole in the kept records {seqs}")
    for thread in sorted(set(now_kept) | set(expected or {})):
        if expected is not None and now_kept.get(thread) != expected.get(thread):
            problems.append(f"thread {thread}: kept {_span(now_kept.get(thread))}, the dry"
                            f" run kept {_span(expected.get(thread))}")
    young = obj.storage.exec(
        "SELECT COUNT(*) AS n FROM tl_history WHERE created_at >= ?", run.cutoff).one()["n"]
    if young == 0:
        problems.append("nothing young is left: the scenario deletes everything")
    if min(seqs[0] for thread, seqs in now_kept.items() if thread != "w") < 10:
        problems.append(f"retention deleted (almost) nothing: {now_kept}")
    # Delivery: every record of every Thread, first deliveries in seq order per Thread.
    first: dict[str, list[int]] = {}
    for thread, seq in run.world.delivered:
        seen = first.setdefault(thread, [])
        if seq not in seen:
            seen.append(seq)
    for thread, last in last_seqs(obj).items():
        if first.get(thread) != list(range(1, last + 1)):
            problems.append(f"thread {thread}: first deliveries {first.get(thread)}")
    cursor = obj.storage.exec("SELECT cursor FROM tl_subscribers").one()["cursor"]
    end = obj.storage.exec("SELECT MAX(pos) AS pos FROM tl_history").one()["pos"]
    if cursor != end:
        problems.append(f"the subscriber's cursor {cursor} is not at the log's end {end}")
    # A submission goes with its settlement record, and its rows with it.
    orphans = obj.storage.exec(
        "SELECT (SELECT COUNT(*) FROM tl_journal WHERE submission_id NOT IN"
        " (SELECT id FROM tl_submissions)) + (SELECT COUNT(*) FROM tl_waits WHERE"
        " submission_id NOT IN (SELECT id FROM tl_submissions)) AS n").one()["n"]
    if orphans:
        problems.append(f"{orphans} journal or wait rows outlive their submission")
    for row in obj.storage.exec(
            "SELECT s.id FROM tl_submissions s WHERE s.settled_at IS NOT NULL AND NOT EXISTS"
            " (SELECT 1 FROM tl_history h WHERE h.thread_id = s.thread_id"
            " AND h.submission_id = s.id AND h.kind = 'submission.settled')"):
        problems.append(f"submission {row['id']} is kept without its settlement record")
    waiting_records = obj.storage.exec(
        "SELECT COUNT(*) AS n FROM tl_history WHERE submission_id = ?", run.waiting).one()["n"]
    if waiting_records != 2:
        problems.append(f"the waiting submission has {waiting_records} records, not 2")
    return problems


async def finish(run: Run) -> list[str]:
    """Decide the approval: the waiting submission completes with its records intact."""
    run.obj.approve(run.waiting, "go")
    await run.obj.run_alarms(until=run.obj.clock.now_ms() + 60_000)
    result = run.obj.submission(run.waiting).result
    return [] if result == {"approved": True} else [f"the waiting submission ended {result}"]


_dry: dict[int, tuple[dict[str, int], dict[str, list[int]]]] = {}


def dry(seed: int) -> tuple[dict[str, int], dict[str, list[int]]]:
    if seed not in _dry:
        run = asyncio.run(play(seed, None))
        try:
            problems = check(run, None)
            hits = {location: run.obj.hits(location) for location in RETENTION_LOCATIONS}
            _dry[seed] = (hits, kept(run.obj))
            problems += asyncio.run(finish(run))
            assert not problems, "\n".join(problems)
        finally:
            run.close()
    return _dry[seed]


def occurrences(hits: int) -> list[int]:
    return sorted({1, min(2, hits), (hits + 1) // 2, hits})


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("location", RETENTION_LOCATIONS)
def test_a_retention_wave_lost_at_every_failpoint_loses_nothing_retained(
    location: str, seed: int
) -> None:
    hits, expected = dry(seed)
    assert hits[location], f"the scenario never reaches {location}"
    failures = []
    for occurrence in occurrences(hits[location]):
        run = asyncio.run(play(seed, (location, occurrence)))
        try:
            problems = check(run, expected)
            if not run.obj.crashes[0].fired:
                problems.append("the crash never happened")
            elif run.obj.evictions == 0:
                problems.append("the crash was swallowed: the object was never restarted")
            problems += asyncio.run(finish(run))
        finally:
            run.close()
        failures += [f"arrival {occurrence}/{hits[location]}: {p}" for p in problems]
    assert not failures, f"{location} (seed {seed}):\n" + "\n".join(failures)
