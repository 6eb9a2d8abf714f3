"""Crash matrix of a hung message target beside a healthy one: lose the sending space's object
at every failpoint its run reaches, then let the alarms alone finish the work.

Space ``a`` sends, from one submission, messages interleaved to the hung space ``c`` (its
object takes calls and answers none until it is released), to the healthy space ``b`` and into
its own space. A dry run of each seed counts the failpoints reached; each case crashes there
(first, second, middle and last arrival), the simulated platform restarts the object, and the
alarms fire on. Every run must keep these invariants:

* while ``c`` hangs, the messages to ``b`` and into ``a`` are all delivered, and ``a``'s
  messages lane is never parked;
* once ``c`` answers again, nothing is lost: each target Thread holds exactly one submission
  per message sent to it (each admitted once, by message id), each settled;
* nothing is delivered out of order: each target Thread's submissions follow the order the
  messages to that space were sent;
* at the end every message is delivered, and every space's alarm is cleared.

The scenario's failpoints are those of :mod:`test_maintenance_crash_matrix`'s locations it
reaches; ``test_the_scenario_reaches_the_message_failpoints`` keeps it reaching the lane's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_maintenance_crash_matrix import occurrences, retrying

from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.maintenance.message_lane import ADMITTING, ANSWERED
from threadline.scheduling import FAILPOINT_LOCATIONS, MESSAGES, LaneState
from threadline.testing import SimulatedDeployment
from threadline.threads import message_rows

START = 1_700_000_000_000
SEEDS = (0, 1)
CONFIG = RuntimeConfig(alarm_backoff_base_ms=100, alarm_backoff_cap_ms=2_000)
#: The messages ``scatter`` sends, in order: (space, n).
SENDS = (("c", 0), ("b", 0), ("a", 0), ("c", 1), ("b", 1), ("c", 2), ("a", 1), ("b", 2))
#: How long ``c`` hangs (simulated ms): several of its backoffs and call bounds.
HANG_MS = 90_000
MAX_PASSES = 2_000


def build_app() -> Application:
    app = Application(CONFIG)

    @app.agent("scatter")
    async def scatter(turn: Turn) -> Any:
        for space, n in SENDS:
            await turn.send(space, "inbox", {"n": n}, agent="echo")
        return len(SENDS)

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return await turn.step("say", lambda: turn.input)

    return app


class Run:
    def __init__(self, world: SimulatedDeployment) -> None:
        self.world = world
        self.problems: list[str] = []


async def play(seed: int, crash: tuple[str, int] | None) -> Run:
    world = SimulatedDeployment(build_app(), clock=ManualClock(START), seed=seed,
                                spaces=("a", "b", "c"), check_alarm_invariant=True)
    run = Run(world)
    a = world.space("a")
    if crash is not None:
        a.crash_at(*crash)
    await retrying(a, a.start)
    await world.start()
    hung = world.hang_deliveries("c")
    await retrying(a, lambda: a.admit("sender", "scatter", None, "k0"))
    lane_states: set[LaneState] = set()
    while world.clock.now_ms() < START + HANG_MS:
        fired = await world.fire_next()
        if fired is None:
            run.problems.append("no alarm set while messages to c were pending")
            break
        lane = a.space.scheduler.due_queue.get(MESSAGES)
        if lane is not None:
            lane_states.add(lane.state)
    if LaneState.PARKED in lane_states:
        run.problems.append("a's messages lane parked while c hung")
    for space in ("a", "b"):
        want = [n for target, n in SENDS if target == space]
        got = [s.input for s in world.space(space).submissions("inbox")]
        if got != [{"n": n} for n in want]:
            run.problems.append(f"while c hung, {space}'s inbox held {got}, not {want}")
    if world.space("c").submissions("inbox"):
        run.problems.append("the hung space admitted something")
    hung.release()
    await world.run_alarms(max_passes=MAX_PASSES)
    for space in ("a", "b", "c"):
        inbox = world.space(space).submissions("inbox")
        want = [{"n": n} for target, n in SENDS if target == space]
        if [s.input for s in inbox] != want:
            run.problems.append(f"{space}'s inbox ended {[s.input for s in inbox]}, not {want}")
        if any(s.settled_at is None for s in inbox):
            run.problems.append(f"{space}'s inbox has unsettled submissions")
    (sender,) = a.submissions("sender")
    states = [m.state for m in message_rows.of_submission(a.storage, sender.id)]
    if states != ["delivered"] * len(SENDS):
        run.problems.append(f"the messages ended {states}")
    if any(obj.alarm_at is not None for obj in world.objects.values()):
        run.problems.append("an alarm is still set at the end")
    return run


def played(seed: int, crash: tuple[str, int] | None) -> tuple[list[str], dict[str, int], int]:
    """The run's problems, how often it reached each failpoint, and how often ``a`` was lost."""

    async def go() -> tuple[list[str], dict[str, int], int]:
        run = await play(seed, crash)
        a = run.world.space("a")
        try:
            hits = {loc: a.hits(loc) for loc in sorted(FAILPOINT_LOCATIONS)}
            return run.problems, hits, a.evictions
        finally:
            run.world.close()

    return asyncio.run(go())


_dry: dict[int, dict[str, int]] = {}


def dry_hits(seed: int) -> dict[str, int]:
    if seed not in _dry:
        problems, hits, _ = played(seed, None)
        assert not problems, "\n".join(problems)
        _dry[seed] = hits
    return _dry[seed]


def test_the_scenario_reaches_the_message_failpoints() -> None:
    for seed in SEEDS:
        hits = dry_hits(seed)
        assert hits[ADMITTING] and hits[ANSWERED], hits


@pytest.mark.parametrize("seed", SEEDS)
def test_a_hung_target_beside_a_healthy_one_loses_nothing_and_keeps_order_at_every_crash(
    seed: int,
) -> None:
    failures = []
    cases = 0
    for location, hits in dry_hits(seed).items():
        if not hits:
            continue
        for occurrence in occurrences(hits):
            cases += 1
            problems, _, evictions = played(seed, (location, occurrence))
            if evictions == 0:
                problems.append("the crash never happened")
            failures += [f"{location} arrival {occurrence}/{hits}: {p}" for p in problems]
    assert cases >= 20, cases
    assert not failures, "\n".join(failures)
