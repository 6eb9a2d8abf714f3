"""Crash matrix: lose the object at every failpoint of the pass and the runtime, then let the
alarm alone finish the work.

Each scenario declares the failpoints it reaches (``Scenario.reaches``): the matrix holds one
case per scenario, seed and declared failpoint. A dry run of each scenario and seed counts how
often each failpoint is reached (it must reach exactly what is declared); then each case's
runs crash there (first, second, middle and last arrival) with ``Evicted``, the simulated
platform restarts the object and fires alarms until it quiesces, and humans act whenever the
object waits for them. Every run must keep these invariants:

* nothing admitted is lost: every admitted submission exists and ends settled;
* each submission settles exactly once: every settle transition that changed a row is logged
  (whoever made it: an Attempt, recovery, an abort), and it settled with the outcome its
  scenario implies;
* each step ran once; after a loss of the object, a step the journal held as finished never
  ran again and any other step at most once more per loss; an uncertain step ran at most
  once (every Unknown Outcome is resolved by ``accept``);
* after each quiescence, every open submission waits visibly for a human (an approval, an
  Unknown Outcome, an unregistered agent) or is queued behind one in its Thread;
* the alarm invariant held after every commit (``check_alarm_invariant``);
* no pass failed but the one whose statement the scenario makes fail;
* at the end the object is caught up, every lane idle and the alarm cleared, within less
  simulated time than one lease (a claim lost with its incarnation is recovered at once);
* every recovery event reached the (at first failing) hook, in order;
* each ``turn.wake_lane`` enrolled its host lane exactly once (one revision per waking
  submission, whatever was replayed), and every lane woken ran after its last wake (no lane is
  left due at the end);
* with schedules (a cron and an ``every``, run for a while instead of to quiescence): each
  fire's ``ctx.submit`` admitted exactly once (one submission per default key, every key of a
  completed fire present), no fire ran twice to completion, every fire of the window completed
  and every scheduled submission settled once, and at the end only the schedules' lanes are
  due, at their next fire.
* with messages (``turn.send`` into the sender's own space, into another space's object through
  the deployment's router, and to an agent unknown there): each message was admitted exactly
  once at its target (its Thread holds just that submission, settled once), the refused one
  failed with exactly one ``message.failed`` record in the sender's log, and every space's
  alarm is cleared at the end.
* with subscribers (a callable one, failing its first delivery, and a required one): every
  record of the log was delivered at least once to each, every batch in log order within each
  Thread and each Thread's records first delivered in order; each cursor ends at the log's end;
  the required one held no Thread forever.
* with everything that delivers at once (a deployment of two spaces; a webhook posting through
  the deployment's outbound port, answering 503 once, a callable and a required subscriber; a
  head taking follow-up input; messages into its own space and the peer's, one refused there):
  every record of each space's log reached each subscriber (the webhook: in requests it
  answered 2xx) at least once, in order per Thread, and each cursor ends at its log's end;
  each message was admitted exactly once at its target; the follow-ups were joined once and
  settled once with the head; every submission settled exactly once.
* and when the required subscriber refuses a Thread's records for good (``DeliveryRefused``):
  it is parked on that Thread alone, having consumed none of its records and every other
  Thread's, each in order; only that Thread has work waiting (every other submission settled,
  messages and the other subscribers went on); the parking was logged once, naming that
  Thread, and ``/maintenance`` shows it with exactly that Thread and its open submissions.
* each delayed submission was admitted exactly once, behind the input its Thread received
  meanwhile, and no earlier than its due time (or aborted while scheduled), and each
  ``turn.submit`` admitted exactly once: its Thread holds just the submissions its agent's
  result names, each settled once; nothing is left scheduled at the end.
* follow-up input: the chat input queued behind a head that takes it (``turn.followups()``)
  was joined into that head once, settled once with the head's result, and every run of the
  head got the same list (the journaled one); the input for another agent behind it, and the
  chat input behind that, ran on their own, FIFO.

A failpoint that no scenario reaches fails ``test_every_failpoint_is_reached``; one a scenario
reaches and does not declare, or declares and does not reach, fails
``test_each_scenario_reaches_exactly_what_it_declares``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest

import threadline
from threadline import (
    Application,
    DeliveryRefused,
    LaneContext,
    ManualClock,
    Record,
    RuntimeConfig,
    ScheduleContext,
)
from threadline.api.http import Request
from threadline.delivery.outbound import OutboundResponse
from threadline.errors import Evicted
from threadline.maintenance.required_gate import read_holds
from threadline.maintenance.subscriber_cursors import read_rows
from threadline.schedules import fire_key
from threadline.scheduling import FAILPOINT_LOCATIONS, RETENTION_LOCATIONS, read_state
from threadline.scheduling.due_queue import DueQueue
from threadline.testing import (
    Effects,
    SimulatedDeployment,
    SimulatedObject,
    StatementFailure,
    is_eviction,
)
from threadline.threads import (
    Outcome,
    ScheduledSubmission,
    SubmissionState,
    Turn,
    history,
    message_rows,
    transitions,
)
from threadline.threads.records import MESSAGE_FAILED

START = 1_700_000_000_000
SEEDS = (0, 1)
#: Not a failpoint of the library: the object is lost inside an uncertain step, after its
#: external effect happened and before the step returned, the case Unknown Outcomes exist for.
INSIDE_UNCERTAIN = "agent:inside-uncertain-step"
# Retention's failpoints have their own matrix (test_retention_crash_matrix.py): these
# scenarios run without retention.
LOCATIONS = [*sorted(FAILPOINT_LOCATIONS - set(RETENTION_LOCATIONS)), INSIDE_UNCERTAIN]
# Short backoffs keep the simulated time small; the rules are the same.
CONFIG = RuntimeConfig(alarm_backoff_base_ms=100, alarm_backoff_cap_ms=2_000)


@dataclass
class World:
    """What survives every eviction: the agents' effects and the hook's deliveries."""

    effects: Effects = field(default_factory=Effects)
    events: list[tuple[int, str, str]] = field(default_factory=list)
    hook_failures: int = 0
    uncertain_runs: int = 0
    crash_inside_uncertain: int | None = None
    #: Every successful settle transition (a compare-and-set that changed the row), by id.
    settlements: list[str] = field(default_factory=list)
    #: Waves each host lane ran to their end.
    lane_waves: Counter[str] = field(default_factory=Counter)
    #: (schedule, fire) of each run of a schedule's function that returned.
    schedule_runs: list[tuple[str, int]] = field(default_factory=list)
    #: What each run of a ``chat`` submission got from ``turn.followups()``, by id.
    followups_seen: dict[str, list[list[Any]]] = field(default_factory=dict)
    #: Every batch each subscriber was handed, in order, across incarnations.
    deliveries: dict[str, list[list[Record]]] = field(default_factory=dict)
    mirror_failed: bool = False
    #: The webhook's receiver, shared by every space of the deployment.
    receiver: Receiver = field(default_factory=lambda: Receiver(busy={2}))
    #: The maintenance log's lines (parkings are reported there).
    log: list[str] = field(default_factory=list)


@dataclass
class Receiver:
    """A webhook's destination behind the outbound port: keeps every request, answers 503 to
    the ``busy`` ones (by arrival, from 1) and 200 to the others (``handled``); notes each
    request whose signature does not verify (``forged``)."""

    busy: set[int] = field(default_factory=set)
    requests: list[bytes] = field(default_factory=list)
    handled: list[dict[str, Any]] = field(default_factory=list)
    forged: list[str] = field(default_factory=list)

    async def post(self, url: str, *, headers: Mapping[str, str], body: bytes,
                   timeout_ms: int) -> OutboundResponse:
        self.requests.append(body)
        signed = headers["threadline-signature"]
        try:
            at = int(signed.split(",")[0].removeprefix("t="))
            threadline.verify_signature(body, signed, WEBHOOK_ENV["HOOK_SECRET"], now=at)
        except (ValueError, threadline.SignatureInvalid) as error:
            self.forged.append(str(error))
        if len(self.requests) in self.busy:
            return OutboundResponse(503)
        self.handled.append(json.loads(body))
        return OutboundResponse(200)


class _Lines(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def maintenance_log(world: World) -> Iterator[None]:
    """Keep the maintenance log's lines in the world for the run."""
    logger = logging.getLogger("threadline.maintenance")
    handler = _Lines(world.log)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@contextmanager
def settlements_logged(world: World) -> Iterator[None]:
    """Log every settle transition that changed a row, whoever makes it.

    A settle counted here and then rolled back with its transaction would count too: the check
    can only err towards reporting a duplicate, never towards hiding one.
    """
    original = transitions.settle

    def logged(storage: Any, submission_id: str, **kwargs: Any) -> bool:
        changed = original(storage, submission_id, **kwargs)
        if changed:
            world.settlements.append(submission_id)
        return changed

    transitions.settle = logged  # type: ignore[assignment]
    try:
        yield
    finally:
        transitions.settle = original  # type: ignore[assignment]


def build_app(
    world: World, *, with_ghost: bool, schedules: bool = False, subscribers: bool = False,
    webhook: bool = False, refuse: str | None = None,
) -> Application:
    app = Application(CONFIG)

    def effect(turn: Turn, name: str) -> Callable[[], int]:
        return lambda: world.effects.hit(f"{turn.submission_id}:{name}")

    @app.agent("step1")
    async def step1(turn: Turn) -> Any:
        return await turn.step("only", effect(turn, "only"))

    @app.agent("flow")
    async def flow(turn: Turn) -> Any:
        a = await turn.step("a", effect(turn, "a"))
        await turn.emit({"text": "progress"})

        def uncertain() -> int:
            # An external call that may have acted: a loss after it makes an Unknown Outcome.
            done = world.effects.hit(f"{turn.submission_id}:b")
            world.uncertain_runs += 1
            if world.uncertain_runs == world.crash_inside_uncertain:
                raise Evicted(INSIDE_UNCERTAIN)
            return done

        b = await turn.step("b", uncertain, effect="uncertain")
        c = await turn.step("c", effect(turn, "c"))
        return [a, b, c]

    @app.agent("review")
    async def review(turn: Turn) -> Any:
        draft = await turn.step("draft", effect(turn, "draft"))
        decision = await turn.approval("ok", {"draft": draft})
        return {"approved": decision.approved}

    @app.agent("timer")
    async def timer(turn: Turn) -> Any:
        await turn.step("before", effect(turn, "before"))
        await turn.sleep(5)
        return await turn.step("after", effect(turn, "after"))

    @app.agent("flaky")
    async def flaky(turn: Turn) -> Any:
        # Fails the first time it really runs, whatever Attempt that is.
        if world.effects.hit(f"{turn.submission_id}:try") == 1:
            raise RuntimeError("transient")
        return "recovered"

    @app.agent("waker")
    async def waker(turn: Turn) -> Any:
        a = await turn.step("a", effect(turn, "a"))
        await turn.wake_lane("sync")
        await turn.wake_lane("digest")
        return [a, await turn.step("c", effect(turn, "c"))]

    @app.agent("submitter")
    async def submitter(turn: Turn) -> Any:
        a = await turn.step("a", effect(turn, "a"))
        out = f"{turn.thread_id}-out"
        now = await turn.submit(out, {"n": a}, agent="step1")
        later = await turn.submit(out, {"n": a}, agent="step1",
                                  not_before=timedelta(milliseconds=SUBMIT_DELAY_MS))
        return [a, now, later, await turn.step("c", effect(turn, "c"))]

    @app.agent("messenger")
    async def messenger(turn: Turn) -> Any:
        a = await turn.step("a", effect(turn, "a"))
        here = await turn.send(SPACE, f"{turn.thread_id}-in", {"n": a}, agent="step1")
        there = await turn.send(PEER, "inbox", {"n": a}, agent="step1")
        refused = await turn.send(PEER, "inbox", {"n": a}, agent="nobody")
        return [a, here, there, refused, await turn.step("c", effect(turn, "c"))]

    @app.agent("chat", join_followups=True)
    async def chat(turn: Turn) -> Any:
        a = await turn.step("a", effect(turn, "a"))
        taken = [item.input for item in await turn.followups()]
        world.followups_seen.setdefault(turn.submission_id, []).append(taken)
        return {"a": a, "followups": taken, "c": await turn.step("c", effect(turn, "c"))}

    @app.lane("sync")
    async def sync(ctx: LaneContext) -> None:
        world.lane_waves["sync"] += 1

    @app.lane("digest", phase="after-native")
    async def digest(ctx: LaneContext) -> None:
        world.lane_waves["digest"] += 1

    if schedules:

        @app.cron("* * * * *", id="minutely")
        async def minutely(ctx: ScheduleContext) -> None:
            await ctx.submit("cron", ctx.fire_ms, agent="step1")
            world.schedule_runs.append(("minutely", ctx.fire_ms))

        @app.every(timedelta(seconds=20), id="pulse")
        async def pulse(ctx: ScheduleContext) -> None:
            await ctx.submit("pulse-a", ctx.fire_ms, agent="step1")
            await ctx.submit("pulse-b", ctx.fire_ms, agent="step1")
            world.schedule_runs.append(("pulse", ctx.fire_ms))

    @app.agent("chatty")
    async def chatty(turn: Turn) -> Any:
        for n in range(3):
            await turn.emit({"n": n}, kind="chat")
        return await turn.step("a", effect(turn, "a"))

    if subscribers:

        @app.subscriber("mirror", batch=2)
        async def mirror(batch: list[Record]) -> None:
            if not world.mirror_failed:
                world.mirror_failed = True
                raise RuntimeError("mirror unavailable")  # backs off, then delivers
            world.deliveries.setdefault("mirror", []).append(batch)

        @app.subscriber("ledger", required=True, batch=3)
        async def ledger(batch: list[Record]) -> None:
            if any(record.thread_id == refuse for record in batch):
                raise DeliveryRefused(f"the ledger refuses {refuse}", detail="closed book")
            world.deliveries.setdefault("ledger", []).append(batch)

    if webhook:
        app.webhook("hook", url="https://receiver.example/hook", secret_env="HOOK_SECRET",
                    batch=2)

    if with_ghost:

        @app.agent("ghost")
        async def ghost(turn: Turn) -> Any:
            return await turn.step("boo", effect(turn, "boo"))

    @app.on_recovery_event
    async def hook(event: Any) -> None:
        # Fails twice, then delivers: the lane must back off and retry without blocking.
        if world.hook_failures < 2:
            world.hook_failures += 1
            raise RuntimeError("hook unavailable")
        world.events.append((int(event.seq), str(event.kind), str(event.thread_id)))

    return app


@dataclass(frozen=True)
class Item:
    thread: str
    agent: str
    #: What a human does to it: "approve" or "abort-waiting" (abort instead) at its approval,
    #: "abort-queued" right after admitting it, "corrupt-timer" (damage its timer's row so that
    #: recovery fails, then repair it once the fault shows).
    human: str = ""
    #: Admitted with ``not_before`` this far from the admission (a delayed submission when
    #: ahead, admitted at once when behind); None: no due time.
    delay_ms: int | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    items: tuple[Item, ...]
    #: The failpoints it reaches (of ``LOCATIONS``): the matrix crashes it at each of them and
    #: at no other; ``test_each_scenario_reaches_exactly_what_it_declares`` keeps this honest.
    reaches: frozenset[str]
    #: Threads whose input is admitted by a producer whose body awaits (``gate.mutation``).
    slow_producer: frozenset[str] = frozenset()
    #: SQL text of a pass statement that fails once (the pass fails and backs off).
    failing_statement: str | None = None
    #: Declare the schedules and run this long (ms of simulated time), not to quiescence.
    runs_for_ms: int | None = None
    #: Run the object as space ``SPACE`` of a deployment that also holds ``PEER``.
    deployment: bool = False
    #: Declare the subscribers.
    subscribers: bool = False
    #: Declare a webhook subscriber too (through the deployment's outbound port).
    webhook: bool = False
    #: The Thread whose records the required subscriber refuses for good (it parks).
    refuse: str | None = None

    @property
    def needs_deploy(self) -> bool:
        return any(item.agent == "ghost" for item in self.items)


#: What every scenario reaches: passes run, and an Attempt runs steps and settles.
EVERY_SCENARIO = frozenset({
    "maintenance:dirty:before", "maintenance:dirty:after",
    "maintenance:ensure:before", "maintenance:ensure:after",
    "maintenance:begin:before", "maintenance:begin:after",
    "maintenance:select:before", "maintenance:select:after",
    "maintenance:checkpoint:before", "maintenance:checkpoint:after",
    "maintenance:finish:before", "maintenance:finish:after",
    "attempt:claimed", "step:started", "step:finished", "settle:before", "settle:after",
})
#: What the ``flow`` agent adds: it emits, and its uncertain step can be crashed inside.
FLOW = frozenset({"emit:committed", INSIDE_UNCERTAIN})
ONE = Scenario("one-submission", (Item("t", "flow"),), reaches=EVERY_SCENARIO | FLOW)
THREADS = Scenario(
    "5-threads-x-4",
    (
        Item("t1", "flow"), Item("t1", "flow"), Item("t1", "step1"), Item("t1", "step1"),
        Item("t2", "review", "approve"), Item("t2", "flow"), Item("t2", "timer"),
        Item("t2", "step1"),
        Item("t3", "step1"), Item("t3", "step1", "abort-queued"), Item("t3", "flaky"),
        Item("t3", "flow"),
        Item("t4", "review", "abort-waiting"), Item("t4", "timer", "corrupt-timer"),
        Item("t4", "flow"), Item("t4", "step1"),
        Item("t5", "ghost"), Item("t5", "step1"), Item("t5", "flow"),
        Item("t5", "review", "approve"),
    ),
    reaches=EVERY_SCENARIO | FLOW | {
        # No other scenario has a slow producer, a failing statement, a ghost agent (bound
        # by a redeploy) or a damaged timer.
        "maintenance:mutation:armed", "maintenance:mutation:finished",
        "maintenance:retry:before", "maintenance:retry:after",
        "maintenance:binding-retry:before", "maintenance:binding-retry:after",
        "maintenance:recovery-status:before", "maintenance:recovery-status:after",
    },
    slow_producer=frozenset({"t2"}),
    failing_statement="UPDATE tl_maintenance SET nonterminal",
)
#: Host lanes woken by agents: a concurrent one and an after-native one.
LANES = Scenario(
    "host-lanes",
    (Item("t1", "waker"), Item("t2", "waker"), Item("t1", "step1"), Item("t3", "waker")),
    reaches=EVERY_SCENARIO,
)
#: A cron (every minute: two fires) and an ``every`` (every 20 s: six fires) beside a client's
#: submission, each fire submitting to its own Threads.
SCHEDULES = Scenario(
    "schedules", (Item("t1", "step1"),),
    reaches=EVERY_SCENARIO | {
        "schedule:fire:recorded", "schedule:run:returned", "schedule:run:completed",
    },
    runs_for_ms=130_000,
)
#: The schedules' default-keyed submissions: (schedule, Thread, ordinal) of each.
SCHEDULED = (("minutely", "cron", 0), ("pulse", "pulse-a", 0), ("pulse", "pulse-b", 1))
#: The fires of the window of SCHEDULES (START is a multiple of 20 s).
WINDOW_FIRES = {
    "minutely": [fire for fire in range(START + 1, START + 130_001) if fire % 60_000 == 0],
    "pulse": [START + n * 20_000 for n in range(1, 7)],
}
#: Delayed submissions (over HTTP, as a client makes them) and ``turn.submit``s (one at once,
#: one delayed).
DELAYED = Scenario(
    "delayed-submissions",
    (
        Item("d1", "step1", delay_ms=3_000), Item("d1", "flow"),
        Item("d2", "step1", delay_ms=3_000), Item("d2", "step1", "abort-queued", delay_ms=6_000),
        Item("d3", "submitter"), Item("d3", "step1", delay_ms=-1_000),
    ),
    reaches=EVERY_SCENARIO | FLOW | {"maintenance:delayed:admitted"},
)
SUBMIT_DELAY_MS = 2_000
#: Follow-up input: the head takes the two chat inputs behind it; the input for another agent
#: ends the run, and the chat input behind that runs on its own.
FOLLOWUPS = Scenario(
    "followups",
    (Item("f1", "chat"), Item("f1", "chat"), Item("f1", "chat"), Item("f1", "step1"),
     Item("f1", "chat")),
    reaches=EVERY_SCENARIO | {"followups:joined"},
)
#: Messages (``messenger``): into its own space, into the peer space, and to an agent the peer
#: does not register.
MESSAGES = Scenario(
    "messages", (Item("m1", "messenger"), Item("m2", "messenger")),
    reaches=EVERY_SCENARIO | {"maintenance:messages:admitting", "maintenance:messages:answered"},
    deployment=True,
)
SPACE, PEER = "acme", "peer"
#: Records emitted by several Threads, delivered to a callable and a required subscriber.
DELIVERY = Scenario(
    "delivery",
    (
        Item("p1", "chatty"), Item("p1", "flow"), Item("p2", "chatty"), Item("p1", "step1"),
        Item("p2", "chatty"), Item("p3", "step1"),
    ),
    reaches=EVERY_SCENARIO | FLOW | {"publication:deliver:before", "publication:deliver:after"},
    subscribers=True,
)
#: Everything that delivers, in a deployment of two spaces: a webhook, a callable and a
#: required subscriber over both spaces' logs; a head taking the follow-up input behind it; a
#: ``turn.send`` into its own space, one into the peer's and one refused there; Threads
#: emitting records.
DELIVERY_ALL = Scenario(
    "delivery-all",
    (
        Item("f1", "chat"), Item("f1", "chat"), Item("f1", "chat"), Item("f1", "step1"),
        Item("f1", "chat"), Item("m1", "messenger"), Item("p1", "chatty"),
        Item("p2", "chatty"), Item("p1", "step1"),
    ),
    reaches=EVERY_SCENARIO | {
        "emit:committed",  # the chatty agents'; no flow here, so no uncertain step
        "followups:joined",
        "maintenance:messages:admitting", "maintenance:messages:answered",
        "publication:deliver:before", "publication:deliver:after",
    },
    deployment=True, subscribers=True, webhook=True,
)
#: The same, the required subscriber refusing for good a batch that holds a record of p1.
DELIVERY_REFUSED = replace(DELIVERY_ALL, name="delivery-refused", refuse="p1")
SCENARIOS = {
    s.name: s
    for s in (ONE, THREADS, LANES, SCHEDULES, DELAYED, FOLLOWUPS, MESSAGES, DELIVERY,
              DELIVERY_ALL, DELIVERY_REFUSED)
}
WEBHOOK_ENV = {"HOOK_SECRET": "whsec_matrix"}
#: Humans look at the object once per simulated second; the alarm runs in between.
TICK_MS = 1_000
MAX_TICKS = 300
_FINISHED_STEPS = "SELECT submission_id, step_key FROM tl_journal WHERE state = 'finished'"
_WAIT_PAYLOAD = "SELECT payload_json FROM tl_waits WHERE id = ?"
_SET_WAIT_PAYLOAD = "UPDATE tl_waits SET payload_json = ? WHERE id = ?"
# Every committed completion of a fire (its pending fire cleared), logged by the database.
_COMPLETION_LOG = (
    "CREATE TABLE IF NOT EXISTS test_completions (schedule_id TEXT, fire INTEGER)",
    "CREATE TRIGGER IF NOT EXISTS test_completion_log AFTER UPDATE OF pending_fire"
    " ON tl_schedules WHEN OLD.pending_fire IS NOT NULL AND NEW.pending_fire IS NULL"
    " BEGIN INSERT INTO test_completions VALUES (OLD.id, OLD.pending_fire); END",
)
_COMPLETIONS = "SELECT schedule_id, fire FROM test_completions ORDER BY rowid"
_SCHEDULED_SUBMISSIONS = (
    "SELECT id, thread_id, idempotency_key FROM tl_submissions"
    " WHERE idempotency_key LIKE 'schedule:%' ORDER BY thread_id, seq"
)


@dataclass
class Run:
    obj: SimulatedObject
    world: World
    ids: list[str]
    problems: list[str] = field(default_factory=list)
    #: The damaged timer wait (id, original payload) until it is repaired.
    damaged: tuple[str, Any] | None = None
    repaired: bool = False
    failure: StatementFailure | None = None
    #: What had happened at each loss of the object (before it restarted).
    losses: list[Loss] = field(default_factory=list)
    #: The due time of each delayed submission admitted as scheduled.
    due: dict[str, int] = field(default_factory=dict)
    #: The deployment the object is a space of (the messages scenario), else None.
    deployment: SimulatedDeployment | None = None

    def close(self) -> None:
        if self.deployment is not None:
            self.deployment.close()
        else:
            self.obj.close()


@dataclass(frozen=True)
class Loss:
    #: How often each effect had happened.
    effects: dict[str, int]
    #: The effects ("submission:step") whose step the journal held as finished.
    finished: frozenset[str]


def remember_losses(run: Run) -> None:
    """Record, at every eviction, what the agents had done and what the journal held."""
    obj, restart = run.obj, run.obj.evict

    async def evict() -> None:
        # A connection of its own: the lost incarnation's storage may already be closed.
        conn = sqlite3.connect(obj.path)
        try:
            conn.execute("PRAGMA synchronous = OFF")  # its close may checkpoint the file
            rows = conn.execute(_FINISHED_STEPS).fetchall()
        finally:
            conn.close()
        finished = frozenset(f"{sub}:{key.removeprefix('step:')}" for sub, key in rows)
        run.losses.append(Loss(dict(run.world.effects.calls), finished))
        await restart()

    obj.evict = evict  # type: ignore[method-assign]


async def survive(obj: SimulatedObject, action: Callable[[], Any]) -> bool:
    """Do a client's or operator's action once; if the object is lost in it, restart it.

    Returns False when the object was lost (the action may or may not have committed).
    """
    try:
        result = action()
        if inspect.isawaitable(result):
            await result
    except BaseException as exc:
        if not is_eviction(exc):
            raise
        await obj.evict()
        return False
    return True


async def retrying(obj: SimulatedObject, action: Callable[[], Any]) -> Any:
    """An idempotent client call, repeated after each loss of the object until it answers."""
    while True:
        try:
            result = action()
            return await result if inspect.isawaitable(result) else result
        except BaseException as exc:
            if not is_eviction(exc):
                raise
            await obj.evict()


async def admit(obj: SimulatedObject, scenario: Scenario, item: Item, n: int) -> Any:
    """Admit item ``n``, idempotent by key: a retry after a loss finds the committed one."""
    if item.delay_ms is not None:
        return obj.admit(item.thread, item.agent, n, f"k{n}",
                         not_before=obj.clock.now_ms() + item.delay_ms)
    if item.thread not in scenario.slow_producer:
        return obj.admit(item.thread, item.agent, n, f"k{n}")
    # A producer whose body awaits (it reads a request, say): prearmed, then committed.
    async with obj.space.scheduler.gate.mutation():
        await asyncio.sleep(0)
        return obj.admit(item.thread, item.agent, n, f"k{n}")


async def play(
    scenario: Scenario, seed: int, crash: tuple[str, int] | None, world: World
) -> Run:
    schedules = scenario.runs_for_ms is not None
    app = build_app(world, with_ghost=False, schedules=schedules,
                    subscribers=scenario.subscribers, webhook=scenario.webhook,
                    refuse=scenario.refuse)
    deployment = None
    if scenario.deployment:
        deployment = SimulatedDeployment(
            app, clock=ManualClock(START), seed=seed, spaces=(SPACE, PEER),
            check_alarm_invariant=True, env=WEBHOOK_ENV,
            http=world.receiver if scenario.webhook else None)
        obj = deployment.space(SPACE)
    else:
        obj = SimulatedObject(app, clock=ManualClock(START), seed=seed,
                              check_alarm_invariant=True)
    if crash is not None and crash[0] == INSIDE_UNCERTAIN:
        world.crash_inside_uncertain = crash[1]
    elif crash is not None:
        obj.crash_at(*crash)
    run = Run(obj, world, [], deployment=deployment)
    remember_losses(run)
    while not await survive(obj, obj.start):
        pass
    if schedules:
        for statement in _COMPLETION_LOG:
            obj.storage.exec(statement)
    if scenario.failing_statement is not None:
        run.failure = obj.fail_statements(scenario.failing_statement)
    for n, item in enumerate(scenario.items):
        admitted = await retrying(obj, lambda i=item, n=n: admit(obj, scenario, i, n))
        run.ids.append(admitted.id)
        if isinstance(admitted, ScheduledSubmission):
            run.due[admitted.id] = admitted.not_before
        if item.human == "abort-queued":
            await retrying(obj, lambda s=admitted.id: obj.abort(s, "changed my mind"))
    deployed = not scenario.needs_deploy
    for _ in range(MAX_TICKS):
        if deployment is not None:
            await deployment.run_alarms(until=obj.clock.now_ms() + TICK_MS, max_passes=300)
        else:
            await obj.run_alarms(until=obj.clock.now_ms() + TICK_MS, max_passes=300)
        quiet = obj.alarm_at is None and (
            deployment is None or all(o.alarm_at is None for o in deployment.objects.values()))
        if quiet:
            run.problems += visible_waits(obj, scenario, run.ids, deployed)
        acted = await humans(run, scenario)
        if scenario.runs_for_ms is not None:
            # Schedules never quiesce: run the window, then until what they admitted settled.
            if obj.clock.now_ms() >= START + scenario.runs_for_ms and all(
                    sub.state is SubmissionState.SETTLED for sub in obj.submissions()):
                break
            continue
        if quiet and not acted:
            if deployed:
                break
            await survive(obj, lambda: obj.redeploy(
                build_app(world, with_ghost=True, subscribers=scenario.subscribers,
                          webhook=scenario.webhook, refuse=scenario.refuse)))
            deployed = True
    else:
        run.problems.append(f"not quiet after {MAX_TICKS} ticks; alarm at {obj.alarm_at}")
    return run


def open_waits(obj: SimulatedObject, sub_id: str) -> list[Any] | None:
    """The submission's open waits; None while one of them is damaged (unreadable)."""
    try:
        return obj.waits(sub_id)
    except ValueError:
        return None


async def humans(run: Run, scenario: Scenario) -> bool:
    """Decide open approvals and Unknown Outcomes, damage and repair; True if anything done."""
    obj, acted = run.obj, False
    faulted = {fault.thread_id for fault in obj.space.faults.all()}
    for sub_id, item in zip(run.ids, scenario.items, strict=True):
        waits = open_waits(obj, sub_id)
        if waits is None:
            if run.damaged is not None and item.thread in faulted and not run.repaired:
                # The fault is visible: the operator repairs the row.
                obj.storage.exec(_SET_WAIT_PAYLOAD, run.damaged[1], run.damaged[0])
                run.repaired = acted = True
            continue
        for wait in waits:
            if wait.kind == "timer" and item.human == "corrupt-timer" and run.damaged is None:
                original = obj.storage.exec(_WAIT_PAYLOAD, wait.id).scalar()
                obj.storage.exec(_SET_WAIT_PAYLOAD, "{damaged", wait.id)
                run.damaged = (wait.id, original)
                acted = True
            elif wait.kind == "approval" and item.human == "abort-waiting":
                acted = True
                await survive(obj, lambda s=sub_id: obj.abort(s, "not wanted"))
            elif wait.kind == "approval":
                acted = True
                await survive(obj, lambda s=sub_id, k=wait.key: obj.approve(s, k))
            elif wait.kind == "unknown":
                acted = True
                await survive(obj, lambda s=sub_id: obj.resolve(s, "accept", "operator: sent"))
    return acted


def visible_waits(
    obj: SimulatedObject, scenario: Scenario, ids: list[str], deployed: bool
) -> list[str]:
    """With the alarm cleared, open work must wait for a human (an approval, an unregistered
    agent, a recovery fault) or queue behind such a wait in its Thread."""
    problems = []
    blocked = {fault.thread_id for fault in obj.space.faults.all()} | parked_gate(obj)
    for sub_id, item in zip(ids, scenario.items, strict=True):
        sub = obj.find(sub_id)
        if sub.state is SubmissionState.SETTLED or item.thread in blocked:
            continue
        kinds = {w.kind for w in open_waits(obj, sub_id) or []}
        if "unknown" in kinds:
            continue  # steps aside: later input of its Thread runs on
        if "approval" in kinds or (item.agent == "ghost" and not deployed):
            blocked.add(item.thread)
            continue
        problems.append(f"{sub_id} ({item.agent} on {item.thread}) is {sub.state} with the "
                        "alarm cleared, waiting for nobody")
    return problems


def parked_gate(obj: SimulatedObject) -> set[str]:
    """The Threads whose native work waits for a required subscriber parked on them (an
    operator must act; ``/maintenance`` shows them)."""
    rows = read_rows(obj.storage)
    parked = {thread for name, held in read_holds(obj.storage).items()
              for thread, hold in held.items() if hold.parked}
    return parked | {thread for thread, name in obj.space.publication.gated().items()
                     if name in rows and rows[name].parked}


def expected_outcome(item: Item) -> Outcome:
    return Outcome.ABORTED if item.human.startswith("abort") else Outcome.COMPLETED


def check(run: Run, scenario: Scenario) -> list[str]:
    obj, problems = run.obj, list(run.problems)
    storage = obj.storage
    if len(run.ids) != len(scenario.items):
        problems.append(f"admitted {len(run.ids)} of {len(scenario.items)}")
    settlements = Counter(run.world.settlements)
    made = made_by_agents(run, scenario)
    held = parked_gate(obj) if scenario.refuse else set()
    waiting: set[str] = set()
    for sub_id, item in zip(run.ids, scenario.items, strict=False):
        sub = obj.find(sub_id)
        if item.thread in held and sub.state is not SubmissionState.SETTLED:
            waiting.add(sub_id)
            continue  # it must wait: refusal_problems checks it
        if isinstance(sub, ScheduledSubmission):
            problems.append(f"{sub_id} ({item.agent}) was never admitted: due {sub.not_before}")
            continue
        if sub.state is not SubmissionState.SETTLED:
            problems.append(f"{sub_id} ({item.agent}) never settled: {sub.state}")
        elif sub.outcome is not expected_outcome(item):
            problems.append(f"{sub_id} ({item.agent}) settled {sub.outcome}: {sub.error}")
        if settlements.get(sub_id, 0) != 1:
            problems.append(f"{sub_id} ({item.agent}) settled {settlements.get(sub_id, 0)} times")
        if item.agent == "flow" and run.world.effects.count(f"{sub_id}:b") > 1:
            problems.append(f"uncertain step of {sub_id} ran "
                            f"{run.world.effects.count(f'{sub_id}:b')} times")
    problems += step_runs(run)
    failed = [r for r in obj.reports if r.phase == "failed"]
    allowed = 0 if scenario.failing_statement is None else 1
    if len(failed) > allowed:
        problems.append(f"passes failed: {[(r.failure_type, r.failure_message) for r in failed]}")
    scheduled = [] if scenario is not SCHEDULES else schedule_problems(run, problems)
    if set(settlements) != (set(run.ids) - waiting) | set(made) | set(scheduled):
        problems.append(f"settlements of unknown submissions: {sorted(settlements)}")
    elapsed = obj.clock.now_ms() - START - (scenario.runs_for_ms or 0)
    if elapsed >= CONFIG.lease_ms:
        # A claim lost with an incarnation is recovered by the next pass, not at its lease.
        problems.append(f"took {elapsed} ms of simulated time, past the {CONFIG.lease_ms} ms lease")
    state = read_state(storage)
    queue = DueQueue(storage, obj.app.config, obj.space.rng)
    due = {lane.id: lane.due_at for lane in queue.lanes() if lane.due_at is not None}
    if scenario is SCHEDULES:
        # The schedules' lanes stay due at their next fires, and the alarm with them.
        nexts = {row.id: row.next_fire for row in obj.space.schedules.rows()}
        if {lane_id: due.pop(lane_id, None) for lane_id in nexts} != nexts:
            problems.append(f"schedule lanes not due at their next fires: {nexts}")
        if obj.alarm_at != min(nexts.values()):
            problems.append(f"alarm {obj.alarm_at}, next fires {nexts}")
    if state.processed < state.dirty or state.pending_retry is not None:
        problems.append(f"not caught up: {state}")
    if due or (obj.alarm_at is not None and scenario is not SCHEDULES):
        problems.append(f"work left at the end: lanes {due}, alarm {obj.alarm_at}")
    if state.recovery_event_ack != state.recovery_event_seq:
        problems.append(f"recovery events left unacknowledged: {state}")
    seqs = [seq for seq, _, _ in run.world.events]
    if seqs != sorted(seqs):
        problems.append(f"recovery events out of order: {run.world.events}")
    if sorted(set(seqs)) != list(range(1, state.recovery_event_seq + 1)):
        problems.append(f"recovery events lost: {run.world.events} of {state.recovery_event_seq}")
    if scenario is LANES:
        wakers = sum(item.agent == "waker" for item in scenario.items)
        for lane_id in ("sync", "digest"):
            row = queue.get(lane_id)
            revision = 0 if row is None else row.revision
            if revision != wakers:
                problems.append(f"lane {lane_id} enrolled {revision} times by {wakers} wakers")
            if run.world.lane_waves[lane_id] == 0:
                problems.append(f"lane {lane_id} never ran")
    if scenario is DELAYED:
        problems += delayed_admissions(run, scenario, made, settlements)
    if scenario in (FOLLOWUPS, DELIVERY_ALL, DELIVERY_REFUSED):
        problems += followup_problems(run, scenario, held)
    if scenario.deployment:
        problems += message_admissions(run, scenario, settlements)
    if scenario.subscribers:
        problems += delivery_problems(run, scenario)
    if scenario.refuse:
        problems += refusal_problems(run, scenario, held)
    if scenario is THREADS:
        kinds = {(kind, thread) for _, kind, thread in run.world.events}
        wanted = {("parked", "t5"), ("created", "t4"), ("cleared", "t4")}
        if not wanted <= kinds:
            problems.append(f"recovery events missing {wanted - kinds}: {run.world.events}")
        if not run.repaired:
            problems.append("the damaged timer never faulted its Thread")
        if run.failure is None or run.failure.remaining:
            problems.append("the failing statement never failed")
    return problems


_LOGGED = "SELECT thread_id, seq, record_id FROM tl_history"


def delivery_problems(run: Run, scenario: Scenario) -> list[str]:
    """What breaks at-least-once, per-Thread ordered delivery to each subscriber, in each
    space: every record of its log delivered, every batch in log order within each Thread,
    each Thread's records first delivered in order, every cursor at the log's end (but the
    one a refusal parked: see :func:`refusal_problems`)."""
    problems: list[str] = []
    spaces = ({SPACE: run.obj} if run.deployment is None
              else dict(run.deployment.objects))
    names = ["mirror", "ledger", *(["hook"] if scenario.webhook else [])]
    # A webhook's request names its space; a callable's batches are told apart by their
    # record ids, unique across spaces.
    hooked: dict[str, list[list[dict[str, Any]]]] = {}
    for body in run.world.receiver.handled:
        hooked.setdefault(str(body["space"]), []).append(body["records"])
    for space, obj in spaces.items():
        logged = {(str(row["thread_id"]), int(row["seq"])): str(row["record_id"])
                  for row in obj.storage.exec(_LOGGED)}
        if not logged and space == SPACE:
            problems.append(f"{space}: no record was appended")
        ids = set(logged.values())
        end = int(obj.storage.exec("SELECT MAX(pos) AS pos FROM tl_history").one()["pos"] or 0)
        rows = read_rows(obj.storage)
        for name in names:
            batches = ([[(r["thread_id"], r["seq"], r["record_id"]) for r in batch]
                        for batch in hooked.get(space, [])] if name == "hook" else
                       [[(r.thread_id, r.seq, r.record_id) for r in batch if r.record_id in ids]
                        for batch in run.world.deliveries.get(name, [])])
            what = f"{space}/{name}"
            row = rows.get(name)
            if name == "ledger" and space == SPACE and scenario.refuse:
                # Parked on the refused Thread alone: every other Thread's records, in
                # order (the rest in refusal_problems).
                problems += ordered_delivery(what, {
                    key: record_id for key, record_id in logged.items()
                    if key[0] != scenario.refuse}, batches)
                continue
            problems += ordered_delivery(what, logged, batches)
            if row is None or row.cursor != end or row.parked:
                problems.append(f"{what} ended at {row}, the log at {end}")
    if run.world.receiver.forged:
        problems.append(f"webhook requests that do not verify: {run.world.receiver.forged}")
    strays = {r.record_id for b in run.world.deliveries.get("mirror", []) for r in b} - {
        str(row["record_id"]) for obj in spaces.values() for row in obj.storage.exec(_LOGGED)}
    if strays:
        problems.append(f"mirror got records no log holds: {sorted(strays)}")
    return problems


def ordered_delivery(
    what: str, logged: dict[tuple[str, int], str], batches: list[list[tuple[str, int, str]]]
) -> list[str]:
    """Every logged record in ``batches`` (each ``(thread, seq, record_id)``), each batch in
    order within each Thread, each Thread's records first delivered in order."""
    problems = []
    got = {(thread, seq): record_id for batch in batches for thread, seq, record_id in batch}
    if got != logged:
        problems.append(f"{what} missed records: {sorted(set(logged) - set(got))}")
    firsts: dict[str, list[int]] = {}
    for batch in batches:
        for thread in {thread for thread, _, _ in batch}:
            seqs = [seq for t, seq, _ in batch if t == thread]
            if seqs != sorted(seqs):
                problems.append(f"{what}: a batch out of order in {thread}: {seqs}")
        for thread, seq, _ in batch:
            seen = firsts.setdefault(thread, [])
            if seq not in seen:
                seen.append(seq)
    for thread, seqs in firsts.items():
        if seqs != sorted(seqs):
            problems.append(f"{what}: {thread} first delivered out of order: {seqs}")
    return problems


def refusal_problems(run: Run, scenario: Scenario, held: set[str]) -> list[str]:
    """The required subscriber that refused a Thread's records for good: parked on that Thread
    alone (its cursor went on over the others'), having consumed none of its records; reported
    once, naming it; ``/maintenance`` shows it with exactly that Thread and its open work.
    Only that work waits: every other submission settled (checked by ``check``)."""
    obj, problems = run.obj, []
    refused = str(scenario.refuse)
    row = read_rows(obj.storage).get("ledger")
    holds = read_holds(obj.storage).get("ledger", {})
    hold = holds.get(refused)
    if (row is None or row.parked or hold is None or not hold.parked
            or hold.detail != "closed book" or set(holds) != {refused}):
        problems.append(f"the refusing ledger ended {row}, holding {holds}")
    consumed = [r for b in run.world.deliveries.get("ledger", []) for r in b
                if r.thread_id == refused]
    if consumed:
        problems.append(f"the ledger consumed {refused}'s records {consumed}")
    if held != {refused}:
        problems.append(f"the gate holds {sorted(held)}, not just {refused}")
    waiting = [sub_id for sub_id, item in zip(run.ids, scenario.items, strict=False)
               if obj.find(sub_id).state is not SubmissionState.SETTLED]
    refused_next = run.ids[max(i for i, item in enumerate(scenario.items)
                               if item.thread == refused)]
    if refused_next not in waiting:
        problems.append(f"{refused_next}, behind the refused records, did not wait")
    lines = [line for line in run.world.log if "'ledger' is parked" in line]
    if len(lines) != 1 or f"on thread {refused!r}" not in lines[0]:
        problems.append(f"the parking was reported as {lines}")
    view = asyncio.run(maintenance_view(obj))
    entry = next((e for e in view["subscribers"] if e["name"] == "ledger"), None)
    open_ids = {s.id for s in obj.submissions(refused) if s.state is not SubmissionState.SETTLED}
    if (entry is None or entry["state"] != "parked" or entry["waiting_threads"] != [refused]
            or [(h["thread"], h["state"]) for h in entry["held_threads"]] != [
                (refused, "parked")]
            or set(entry["waiting_submissions"]) != open_ids or not set(waiting) <= open_ids):
        problems.append(f"/maintenance shows {entry}; held {sorted(held)}, open {open_ids}")
    return problems


async def maintenance_view(obj: SimulatedObject) -> dict[str, Any]:
    """``GET /v1/spaces/{space}/maintenance`` as the object answers it."""
    response = await obj.space.handle(
        Request.from_url("GET", f"http://object/v1/spaces/{obj.name}/maintenance"))
    assert response.status == 200, response.body
    body: dict[str, Any] = response.json()
    return body


def schedule_problems(run: Run, problems: list[str]) -> list[str]:
    """Append what breaks the schedules' invariants; return the scheduled submissions' ids."""
    obj, world = run.obj, run.world
    completed = [(str(row["schedule_id"]), int(row["fire"]))
                 for row in obj.storage.exec(_COMPLETIONS)]
    twice = [item for item, n in Counter(completed).items() if n > 1]
    if twice:
        problems.append(f"fires completed twice: {twice}")
    for schedule_id, fires in WINDOW_FIRES.items():
        done = sorted(fire for name, fire in completed if name == schedule_id)
        if [fire for fire in done if fire <= fires[-1]] != fires:
            problems.append(f"{schedule_id} completed {done}, expected {fires}")
    rows = list(obj.storage.exec(_SCHEDULED_SUBMISSIONS))
    keys = Counter(str(row["idempotency_key"]) for row in rows)
    if any(n > 1 for n in keys.values()):
        problems.append(f"a fire's key admitted twice: {keys}")
    ran = set(world.schedule_runs)
    expected: dict[str, str] = {}
    for schedule_id, fire in set(completed) | ran:
        for name, thread, ordinal in SCHEDULED:
            if name == schedule_id:
                expected[fire_key(schedule_id, fire, ordinal)] = thread
    admitted = {str(row["idempotency_key"]): str(row["thread_id"]) for row in rows}
    if {key: admitted.get(key) for key in expected} != expected:
        problems.append(f"a completed fire's submissions missing: {sorted(expected)} vs "
                        f"{sorted(admitted)}")
    strays = set(admitted) - set(expected)
    if strays:
        # Only a fire whose run was lost mid-way and then superseded may leave part of its
        # submissions; none is superseded here (the object restarts at once).
        problems.append(f"submissions of fires that never completed: {sorted(strays)}")
    ids = [str(row["id"]) for row in rows]
    settlements = Counter(world.settlements)
    for sub_id in ids:
        sub = obj.submission(sub_id)
        if sub.outcome is not Outcome.COMPLETED:
            problems.append(f"scheduled {sub_id} is {sub.state} {sub.outcome}")
        if settlements.get(sub_id, 0) != 1:
            problems.append(f"scheduled {sub_id} settled {settlements.get(sub_id, 0)} times")
    return ids


def made_by_agents(run: Run, scenario: Scenario) -> dict[str, str]:
    """The submissions each ``submitter`` made with ``turn.submit``, by id: its Thread."""
    made: dict[str, str] = {}
    for sub_id, item in zip(run.ids, scenario.items, strict=False):
        sub = run.obj.find(sub_id)
        if item.agent == "submitter" and sub.state is SubmissionState.SETTLED:
            assert not isinstance(sub, ScheduledSubmission)
            for made_id in sub.result[1:3]:
                made[made_id] = f"{item.thread}-out"
        if item.agent == "messenger":
            # What its messages became: in this space, and in the peer's.
            for message in message_rows.of_submission(run.obj.storage, sub_id):
                if message.admitted_as is not None:
                    made[message.admitted_as] = f"{message.to_space}/{message.to_thread}"
    return made


def message_admissions(run: Run, scenario: Scenario, settlements: Counter[str]) -> list[str]:
    """Each message admitted exactly once at its target and settled once there; the refused
    one failed with one ``message.failed`` record; every space quiet at the end."""
    obj, problems = run.obj, []
    assert run.deployment is not None
    peer = run.deployment.space(PEER)
    across: list[str] = []
    for sub_id, item in zip(run.ids, scenario.items, strict=False):
        sub = obj.find(sub_id)
        if item.agent != "messenger" or isinstance(sub, ScheduledSubmission):
            continue
        if sub.outcome is not Outcome.COMPLETED:
            # A sender held by a parked required subscriber (the refused variant) may have sent
            # before the loss that made it wait: what it sent still counts at the peer.
            across += [str(m.admitted_as) for m in message_rows.of_submission(obj.storage, sub_id)
                       if m.to_space == PEER and m.state == "delivered"]
            continue
        _, here, there, refused, _ = sub.result
        by_id = {m.id: m for m in message_rows.of_submission(obj.storage, sub_id)}
        if sorted(by_id) != sorted((here, there, refused)):
            problems.append(f"{sub_id} sent {sorted(by_id)}, its result names "
                            f"{[here, there, refused]}")
            continue
        states = [by_id[i].state for i in (here, there, refused)]
        if states != ["delivered", "delivered", "failed"]:
            problems.append(f"{sub_id}'s messages ended {states}")
        local = [s.id for s in obj.submissions(f"{item.thread}-in")]
        if local != [by_id[here].admitted_as]:
            problems.append(f"{item.thread}-in holds {local}, the message became "
                            f"{by_id[here].admitted_as}")
        across.append(str(by_id[there].admitted_as))
        failed = [r for r in history.read_history(obj.storage, item.thread, limit=1_000)
                  if r["kind"] == MESSAGE_FAILED]
        if [r["record_id"] for r in failed] != [f"{refused}:failed"]:
            problems.append(f"{item.thread} logged {failed} for its refused message")
    inbox = [s.id for s in peer.submissions("inbox")]
    if sorted(inbox) != sorted(across):
        problems.append(f"the peer's inbox holds {inbox}, the messages became {across}")
    for target in [*inbox, *(s.id for s in obj.submissions() if s.thread_id.endswith("-in"))]:
        settled = (peer if target in inbox else obj).submission(target)
        if settled.outcome is not Outcome.COMPLETED or settlements.get(target, 0) != 1:
            problems.append(f"{target} (a message) is {settled.state} {settled.outcome}, "
                            f"settled {settlements.get(target, 0)} times")
    if peer.alarm_at is not None:
        problems.append(f"the peer's alarm is still set at {peer.alarm_at}")
    return problems


def delayed_admissions(
    run: Run, scenario: Scenario, made: dict[str, str], settlements: Counter[str]
) -> list[str]:
    """Each delayed submission admitted once, behind its Thread's earlier input and not before
    its time; each ``turn.submit`` admitted once; nothing left scheduled."""
    obj, problems = run.obj, []
    for sub_id, due in run.due.items():
        sub = obj.find(sub_id)
        if isinstance(sub, ScheduledSubmission) or sub.outcome is Outcome.ABORTED:
            continue
        if sub.settled_at is None or sub.settled_at < due:
            problems.append(f"delayed {sub_id} settled at {sub.settled_at}, before {due}")
    first = obj.find(run.ids[0])
    if first.seq != 2:
        problems.append(f"the delayed d1 submission took seq {first.seq}, not 2 (behind the"
                        " input admitted meanwhile)")
    submitters = sum(item.agent == "submitter" for item in scenario.items)
    if len(made) != 2 * submitters:
        problems.append(f"turn.submit made {sorted(made)} for {submitters} submitters")
    for thread in set(made.values()):
        ids = [sub.id for sub in obj.submissions(thread)]
        if sorted(ids) != sorted(i for i, t in made.items() if t == thread):
            problems.append(f"{thread} holds {ids}, the submitter made {sorted(made)}")
    for made_id in made:
        sub = obj.find(made_id)
        if sub.state is not SubmissionState.SETTLED or settlements.get(made_id, 0) != 1:
            problems.append(f"{made_id} (turn.submit) is {sub.state}, settled "
                            f"{settlements.get(made_id, 0)} times")
    waiting = obj.storage.exec("SELECT COUNT(*) AS n FROM tl_delayed").one()["n"]
    if waiting:
        problems.append(f"{waiting} delayed submissions left scheduled")
    return problems


def followup_problems(run: Run, scenario: Scenario, held: set[str]) -> list[str]:
    """The head joined the two chat inputs behind it once, and they settled with it; every
    run of the head got the same list; the rest ran on their own, FIFO (unless a parked
    required subscriber holds the Thread: then they wait, unjoined)."""
    obj, problems = run.obj, []
    ids = [sub_id for sub_id, item in zip(run.ids, scenario.items, strict=False)
           if item.thread == "f1"]
    head, one, two, other, last = (obj.submission(sub_id) for sub_id in ids)
    if head.result is None or head.result["followups"] != [1, 2]:
        problems.append(f"the head took {head.result}, not the inputs 1 and 2")
    for joined in (one, two):
        if (joined.joined_to, joined.result) != (head.id, head.result):
            problems.append(f"{joined.id} is {joined.state} joined to {joined.joined_to} with"
                            f" {joined.result}, not with the head's {head.result}")
    for alone in (other, last):
        if alone.joined_to is not None:
            problems.append(f"{alone.id} was joined to {alone.joined_to}")
    waits = "f1" in held and last.state is not SubmissionState.SETTLED
    if not waits and (last.result is None or last.result["followups"] != []):
        problems.append(f"the last chat input took {last.result}")
    if last.settled_at is not None and not (other.settled_at or 0) <= last.settled_at:
        problems.append("the last chat input settled before the input ahead of it")
    seen = run.world.followups_seen.get(head.id, [])
    if not seen or any(taken != [1, 2] for taken in seen):
        problems.append(f"the head's runs got {seen} from followups()")
    for joined in (one, two):
        if joined.id in run.world.followups_seen:
            problems.append(f"the joined {joined.id} ran on its own")
    return problems


def step_runs(run: Run) -> list[str]:
    """Steps run once; after a loss of the object a step runs again only if the journal did
    not hold it as finished, and then once more at most per loss."""
    problems = []
    crashed = bool(run.obj.crashes) or run.world.crash_inside_uncertain is not None
    for name, count in run.world.effects.calls.items():
        if name.endswith(":try"):
            continue  # the flaky agent's own counter, not a step
        if not crashed and count != 1:
            problems.append(f"step {name} ran {count} times in a run without crashes")
        for i, loss in enumerate(run.losses):
            before = loss.effects.get(name, 0)
            # Each loss from this one on may cost one more run (a redeploy is a loss too).
            allowed = len(run.losses) - i
            if name in loss.finished and count != before:
                problems.append(f"step {name} ran again after the journal held it finished")
            elif count > before + allowed:
                problems.append(f"step {name} ran {count - before} times after {allowed} losses")
    return problems


# -- the matrix ------------------------------------------------------------------------------

_dry: dict[tuple[str, int], dict[str, int]] = {}
_tally = {"runs": 0, "seconds": 0.0}


def dry_hits(name: str, seed: int) -> dict[str, int]:
    """How often each failpoint is reached by an uncrashed run (which must itself be clean)."""
    if (name, seed) not in _dry:
        scenario = SCENARIOS[name]
        started = time.perf_counter()
        run = played(scenario, seed, None)
        try:
            problems = check(run, scenario)
            assert not problems, "\n".join(problems)
            hits = {loc: run.obj.hits(loc) for loc in LOCATIONS if loc != INSIDE_UNCERTAIN}
            _dry[(name, seed)] = {**hits, INSIDE_UNCERTAIN: run.world.uncertain_runs}
        finally:
            run.close()
            _tally["runs"] += 1
            _tally["seconds"] += time.perf_counter() - started
    return _dry[(name, seed)]


def played(scenario: Scenario, seed: int, crash: tuple[str, int] | None) -> Run:
    world = World()
    with settlements_logged(world), maintenance_log(world):
        return asyncio.run(play(scenario, seed, crash, world))


def occurrences(hits: int) -> list[int]:
    """The arrivals to crash at: the first two, the middle one and the last."""
    return sorted({1, min(2, hits), (hits + 1) // 2, hits})


#: The matrix: each scenario and seed crashed at each failpoint the scenario declares.
CASES = [
    pytest.param(location, name, seed, id=f"{location}-{name}-{seed}")
    for location in LOCATIONS
    for name in sorted(SCENARIOS)
    if location in SCENARIOS[name].reaches
    for seed in SEEDS
]


@pytest.mark.parametrize(("location", "scenario", "seed"), CASES)
def test_crash_at_every_failpoint_then_the_alarm_finishes_the_work(
    location: str, scenario: str, seed: int
) -> None:
    hits = dry_hits(scenario, seed).get(location, 0)
    assert hits, f"{scenario} declares {location} but does not reach it (seed {seed})"
    failures = []
    for occurrence in occurrences(hits):
        started = time.perf_counter()
        run = played(SCENARIOS[scenario], seed, (location, occurrence))
        try:
            problems = check(run, SCENARIOS[scenario])
            fired = (run.world.uncertain_runs >= occurrence if location == INSIDE_UNCERTAIN
                     else run.obj.crashes[0].fired)
            if not fired:
                problems.append(f"the crash at arrival {occurrence} of {hits} never happened")
            elif run.obj.evictions == 0:
                problems.append("the crash was swallowed: the object was never restarted")
        finally:
            run.close()
            _tally["runs"] += 1
            _tally["seconds"] += time.perf_counter() - started
        failures += [f"arrival {occurrence}/{hits}: {p}" for p in problems]
    assert not failures, f"{location} in {scenario} (seed {seed}):\n" + "\n".join(failures)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_each_scenario_reaches_exactly_what_it_declares(scenario: str, seed: int) -> None:
    """A failpoint reached but not declared would go uncrashed; one declared but not reached
    would be a case that crashes nothing."""
    reached = {loc for loc, n in dry_hits(scenario, seed).items() if n}
    declared = SCENARIOS[scenario].reaches
    assert reached == declared, (
        f"{scenario} (seed {seed}) reaches undeclared {sorted(reached - declared)}, "
        f"declares unreached {sorted(declared - reached)}"
    )


def test_every_failpoint_is_reached(capsys: pytest.CaptureFixture[str]) -> None:
    declared = {loc for scenario in SCENARIOS.values() for loc in scenario.reaches}
    undeclared = [loc for loc in LOCATIONS if loc not in declared]
    assert not undeclared, f"no scenario declares {undeclared}"
    reached = {loc: 0 for loc in LOCATIONS}
    for name in SCENARIOS:
        for seed in SEEDS:
            for loc, n in dry_hits(name, seed).items():
                reached[loc] += n
    with capsys.disabled():
        print(
            f"\ncrash matrix: {len(LOCATIONS)} failpoints x {len(SCENARIOS)} scenarios x "
            f"{len(SEEDS)} seeds; {_tally['runs']} runs in {_tally['seconds']:.1f} s"
        )
    assert not [loc for loc, n in reached.items() if n == 0], reached
