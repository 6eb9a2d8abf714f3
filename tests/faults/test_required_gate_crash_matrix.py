"""The required gate under crashes: a required subscriber failing on one of two Threads.

The ``ledger`` subscriber is required and fails every batch holding a record of Thread ``a``
for the first simulated hour (its destination is down for ``a``), then recovers. Thread ``b``
is not held by that. The object is lost at each failpoint the scenario reaches (the first two
arrivals, the middle one and the last), restarted by its alarm, and the work finished. After
every such run:

* Thread ``b``'s first two submissions settled within half an hour, and its third, admitted
  then, within ten minutes more: ``a``'s failures held only ``a``;
* ``a``'s second submission stayed queued while its destination was down, and every run of it
  started only after the ledger had consumed every record ``a``'s first submission appended;
* nothing lost, nothing out of order: every record of the log reached the ledger at least
  once, every batch in log order within each Thread, each Thread's records first delivered
  in order; none of ``a``'s before the hour;
* every submission settled exactly once (one ``submission.settled`` record each); no hold is
  left, the alarm is cleared, and the alarm invariant held after every commit.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import pytest

from threadline import Application, Record, Turn
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import Evicted
from threadline.maintenance.required_gate import read_holds
from threadline.scheduling import FAILPOINT_LOCATIONS
from threadline.testing import SimulatedObject
from threadline.threads.model import SubmissionState
from threadline.threads.records import SUBMISSION_SETTLED

START = 1_700_000_000_000
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)


@dataclass
class Run:
    """What one run of the scenario left."""

    obj: SimulatedObject
    clock: ManualClock
    ids: dict[str, str] = field(default_factory=dict)
    #: The ledger's delivered batches, each with the time it was delivered at.
    batches: list[tuple[int, list[Record]]] = field(default_factory=list)
    #: (event number, name) of each run of an agent.
    runs: list[tuple[int, str]] = field(default_factory=list)
    #: (event number, thread, seq) of each record the ledger consumed.
    consumed: list[tuple[int, str, int]] = field(default_factory=list)
    #: Whether b's submissions settled in time (checked while the run went on).
    isolation: list[str] = field(default_factory=list)
    #: Arrivals at each failpoint before the crash was installed (it counts from there).
    before: dict[str, int] = field(default_factory=dict)
    events: int = 0

    def tick(self) -> int:
        self.events += 1
        return self.events


def _app(run: Run) -> Application:
    app = Application(CONFIG)

    @app.agent("writer")
    async def writer(turn: Turn) -> None:
        run.runs.append((run.tick(), str(turn.input)))
        await turn.emit({"from": turn.input}, kind="note")
        await turn.emit({"from": turn.input, "n": 2}, kind="note")

    @app.subscriber("ledger", required=True, batch=3)
    async def ledger(batch: list[Record]) -> None:
        if run.clock.now_ms() < START + HOUR_MS and any(r.thread_id == "a" for r in batch):
            raise RuntimeError("the ledger is down for a")
        at = run.tick()
        run.batches.append((run.clock.now_ms(), list(batch)))
        run.consumed.extend((at, record.thread_id, record.seq) for record in batch)

    return app


def _settled(obj: SimulatedObject, submission_id: str) -> bool:
    return obj.submission(submission_id).state is SubmissionState.SETTLED


async def _play(crash: tuple[str, int] | None) -> Run:
    clock = ManualClock(START)
    run = Run(obj=None, clock=clock)  # type: ignore[arg-type]
    obj = run.obj = SimulatedObject(_app(run), clock=clock, check_alarm_invariant=True)
    await obj.start()
    for name in ("a1", "b1", "a2", "b2"):
        run.ids[name] = obj.admit(name[0], "writer", name).id
    run.before = {loc: obj.hits(loc) for loc in FAILPOINT_LOCATIONS}
    if crash is not None:
        obj.crash_at(*crash)
    await obj.run_alarms(until=START + 30 * MINUTE_MS)
    if not (_settled(obj, run.ids["b1"]) and _settled(obj, run.ids["b2"])):
        run.isolation.append("b1 and b2 had not settled after half an hour")
    if _settled(obj, run.ids["a2"]):
        run.isolation.append("a2 settled while the ledger was down for a")
    try:
        run.ids["b3"] = obj.admit("b", "writer", "b3", key="b3").id
    except Evicted:  # lost in the admission's own commit: admitted again, idempotently
        await obj.evict()
        run.ids["b3"] = obj.admit("b", "writer", "b3", key="b3").id
    await obj.run_alarms(until=clock.now_ms() + 10 * MINUTE_MS)
    if not _settled(obj, run.ids["b3"]):
        run.isolation.append("b3 had not settled ten minutes after its admission")
    await obj.run_alarms()
    return run


def _problems(run: Run) -> list[str]:
    obj, problems = run.obj, list(run.isolation)
    logged = {(str(row["thread_id"]), int(row["seq"])): (str(row["kind"]), row["submission_id"])
              for row in obj.storage.exec("SELECT thread_id, seq, kind, submission_id"
                                          " FROM tl_history")}
    settled = Counter(submission for kind, submission in logged.values()
                      if kind == SUBMISSION_SETTLED)
    for name, submission_id in run.ids.items():
        if not _settled(obj, submission_id) or settled[submission_id] != 1:
            problems.append(f"{name} is {obj.submission(submission_id).state}, "
                            f"settled {settled[submission_id]} times")
    got = {(r.thread_id, r.seq) for _, batch in run.batches for r in batch}
    if got != set(logged):
        problems.append(f"the ledger missed {sorted(set(logged) - got)}")
    firsts: dict[str, list[int]] = {}
    for at, batch in run.batches:
        for thread in {r.thread_id for r in batch}:
            seqs = [r.seq for r in batch if r.thread_id == thread]
            if seqs != sorted(seqs):
                problems.append(f"a batch out of order in {thread}: {seqs}")
        if at < START + HOUR_MS and any(r.thread_id == "a" for r in batch):
            problems.append(f"a's records delivered at {at}, while its destination was down")
        for r in batch:
            seen = firsts.setdefault(r.thread_id, [])
            if r.seq not in seen:
                seen.append(r.seq)
    problems += [f"{thread} first delivered out of order: {seqs}"
                 for thread, seqs in firsts.items() if seqs != sorted(seqs)]
    # a2 may start only once the ledger consumed every record a1 appended.
    a1_records = {seq for (thread, seq), (_, sub) in logged.items()
                  if thread == "a" and sub == run.ids["a1"]}
    consumed_at = {seq: at for at, thread, seq in reversed(run.consumed) if thread == "a"}
    ready = max((consumed_at.get(seq, run.events + 1) for seq in a1_records), default=0)
    early = [at for at, name in run.runs if name == "a2" and at < ready]
    if early:
        problems.append(f"a2 ran (events {early}) before a1's records were consumed ({ready})")
    if read_holds(obj.storage):
        problems.append(f"holds left: {read_holds(obj.storage)}")
    if obj.alarm_at is not None:
        problems.append(f"the alarm is left at {obj.alarm_at}")
    return problems


def _played(crash: tuple[str, int] | None) -> tuple[list[str], Run]:
    run = asyncio.run(_play(crash))
    try:
        return _problems(run), run
    finally:
        run.obj.close()


_dry: dict[str, int] = {}


def _dry_hits() -> dict[str, int]:
    if not _dry:
        problems, run = _played(None)
        assert not problems, "\n".join(problems)
        _dry.update({loc: run.obj.hits(loc) - run.before[loc]
                     for loc in sorted(FAILPOINT_LOCATIONS)})
    return _dry


#: The failpoints the scenario reaches, each crashed at below.
REACHED = [
    "attempt:claimed", "emit:committed", "maintenance:begin:after", "maintenance:begin:before",
    "maintenance:checkpoint:after", "maintenance:checkpoint:before", "maintenance:dirty:after",
    "maintenance:dirty:before",
    "maintenance:finish:after", "maintenance:finish:before", "maintenance:select:after",
    "maintenance:select:before", "publication:deliver:after", "publication:deliver:before",
    "settle:after", "settle:before",
]


def test_the_scenario_reaches_exactly_the_failpoints_it_is_crashed_at() -> None:
    reached = sorted(loc for loc, hits in _dry_hits().items() if hits)
    assert reached == REACHED


@pytest.mark.parametrize("location", REACHED)
def test_a_crash_anywhere_loses_nothing_and_holds_only_the_failing_thread(location: str) -> None:
    hits = _dry_hits()[location]
    assert hits, f"{location} is not reached"
    failures: list[str] = []
    for occurrence in sorted({1, min(2, hits), (hits + 1) // 2, hits}):
        problems, run = _played((location, occurrence))
        if not run.obj.crashes[0].fired:
            problems.append(f"the crash at arrival {occurrence} of {hits} never happened")
        elif run.obj.evictions == 0:
            problems.append("the crash was swallowed: the object was never restarted")
        failures += [f"arrival {occurrence}/{hits}: {p}" for p in problems]
    assert not failures, f"{location}:\n" + "\n".join(failures)
