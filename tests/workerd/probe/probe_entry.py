"""Test-only Worker for the workerd integration tests; never deployed.

It re-exports the example app's ``Default`` and ``ThreadObject`` (plus a test-only ``/_drive/``
route that runs a Thread's work on demand) and adds a
``StorageProbe`` Durable Object (binding ``PROBE``) that drives ``CloudflareStorage`` directly,
so the tests can pin what the adapter relies on in real workerd. ``/_probe/{object}/{op}`` goes
to the probe object named ``object``; ``/_threads/{object}/{op}`` goes to a
``ProbeThreadObject`` (binding ``PROBE_THREADS``): the deployed ``ThreadObjectBase`` with
test-only agents and two test-only routes (admit, status), so that a submission can be
admitted and then left to the alarm alone. ``/_schedules/`` computes schedule fire times in the
Worker itself (``probe_schedules.py``). The API of spaces named ``sched-*`` is served by
``ScheduledThreadObject`` (binding ``SCHEDULED_THREADS``), whose app declares an ``every``
schedule. The ``caps-*`` and ``mem-*`` spaces and ``/_streams/`` are ``probe_streams.py``'s.
Every other path goes to the app's ``Default``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from probe_schedules import PREFIX as SCHEDULES
from probe_schedules import answer as schedules_answer
from probe_streams import CappedThreadObject, MeasuredThreadObject
from probe_streams import answer as streams_answer
from pyodide.ffi import jsnull
from workers import DurableObject, Response

from entry import Default as AppDefault
from entry import ThreadObject as AppThreadObject
from entry import app as entry_app
from threadline import Record, ScheduleContext
from threadline.app import Application
from threadline.clock import SystemClock
from threadline.config import RuntimeConfig
from threadline.ids import RandomIds
from threadline.scheduling import NATIVE, build_scheduler, read_state
from threadline.storage import MIGRATIONS, migrate, schema_version
from threadline.storage import schema as schema_module
from threadline.storage.cloudflare import CloudflareStorage, is_js_null
from threadline.threads import ThreadRuntime, Turn
from threadline.worker import ThreadObjectBase, WorkersClock

# Retries wait about a millisecond, so a retried Attempt can run again within one request.
probe_app = Application(RuntimeConfig(alarm_backoff_base_ms=1, alarm_backoff_cap_ms=2))


@probe_app.agent("echo")
async def echo(turn: Turn) -> Any:
    """One journaled step: the smallest submission."""
    return await turn.step("echo", lambda: {"got": turn.input})


@probe_app.agent("reviewed")
async def reviewed(turn: Turn) -> Any:
    """A step, a durable approval, a published record, then a result."""
    draft = await turn.step("draft", lambda: f"draft of {turn.input}")
    decision = await turn.approval("publish", {"draft": draft})
    if not decision:
        return {"published": False}
    await turn.emit({"role": "assistant", "text": draft})
    return {"published": True, "attempt": turn.attempt}


@probe_app.agent("flaky")
async def flaky(turn: Turn) -> Any:
    """Fails its first Attempt, succeeds on the second."""
    if turn.attempt == 1:
        raise RuntimeError("transient failure")
    return {"attempt": turn.attempt}


#: Hardening probes: a value limit above the platform's 2 MB row limit, so that values of a
#: few MB reach storage and are refused there (SQLITE_TOOBIG), as an app could configure.
hardening_app = Application(
    RuntimeConfig(alarm_backoff_base_ms=1, alarm_backoff_cap_ms=2, max_value_bytes=4_194_304)
)
#: How often each hardening agent's body or step function ran, per Thread.
hardening_runs: dict[str, int] = {}
PLATFORM_TOO_BIG = 3_000_000


def _count_run(key: str) -> None:
    hardening_runs[key] = hardening_runs.get(key, 0) + 1


@hardening_app.agent("big-step")
async def big_step(turn: Turn) -> Any:
    """An uncertain step whose value is over the platform's row limit."""

    def act() -> str:
        _count_run(turn.thread_id)
        return "x" * PLATFORM_TOO_BIG

    value = await turn.step("act", act, effect="uncertain")
    return len(value)


@hardening_app.agent("big-result")
async def big_result(turn: Turn) -> Any:
    """A result over the platform's row limit."""
    _count_run(turn.thread_id)
    return "x" * PLATFORM_TOO_BIG


@probe_app.agent("over-limit")
async def over_limit(turn: Turn) -> Any:
    """A step value over the default max_value_bytes (256 KiB), below the platform's limit."""
    value = await turn.step("act", lambda: "x" * 300_000, effect="uncertain")
    return len(value)


#: An agent that fails every Attempt, with a budget past the failures a submission lists.
failing_app = Application(
    RuntimeConfig(alarm_backoff_base_ms=1, alarm_backoff_cap_ms=2, max_attempts=12)
)


@failing_app.agent("fails")
async def fails(turn: Turn) -> Any:
    raise ValueError(f"try {turn.attempt}")


# The object whose alarm runs the agents below; a short lease so that an Attempt lost with the
# runtime is found again within seconds.
threads_app = Application(
    RuntimeConfig(lease_ms=2_000, alarm_backoff_base_ms=50, alarm_backoff_cap_ms=1_000)
)
# Where the test-only agents record their effects: the storage of the object running them.
EFFECTS: dict[str, CloudflareStorage] = {}


def record_effect(turn: Turn, what: str) -> None:
    """Write an effect row outside the Attempt's transactions, as an external call would."""
    storage = EFFECTS["storage"]
    storage.exec(
        "INSERT INTO probe_effects (submission_id, what, at) VALUES (?, ?, ?)",
        turn.submission_id,
        what,
        now_ms(),
    )


@threads_app.agent("probe-echo")
async def probe_echo(turn: Turn) -> Any:
    """One journaled step."""

    def work() -> Any:
        record_effect(turn, "echo")
        return {"got": turn.input}

    return await turn.step("echo", work)


@threads_app.agent("probe-busy")
async def probe_busy(turn: Turn) -> Any:
    """A step that keeps the object busy without awaiting any I/O (``input["work"]``
    synchronous statements): a pass of many of these holds the object as long as it runs."""

    def work() -> Any:
        storage = EFFECTS["storage"]
        assert isinstance(turn.input, dict)
        for _ in range(int(turn.input["work"])):
            storage.exec("SELECT 1 AS n")
        return {"busy": turn.input["work"]}

    return await turn.step("work", work)


@threads_app.agent("probe-slow")
async def probe_slow(turn: Turn) -> Any:
    """A step that hangs in its first Attempt until the runtime is killed under it."""

    async def work() -> Any:
        record_effect(turn, f"work:{turn.attempt}")
        if turn.attempt == 1:
            await asyncio.sleep(120)
        return {"done_in_attempt": turn.attempt}

    return await turn.step("work", work)


@threads_app.agent("probe-uncertain")
async def probe_uncertain(turn: Turn) -> Any:
    """An uncertain step (an external call whose effect cannot be checked) that hangs in its
    first Attempt until the runtime is killed under it: recovery finds it lost in flight."""

    async def charge() -> Any:
        record_effect(turn, f"charge:{turn.attempt}")
        if turn.attempt == 1:
            await asyncio.sleep(120)
        return {"charged": turn.input}

    charged = await turn.step("charge", charge, effect="uncertain")
    return {"charged": charged, "attempt": turn.attempt}


# The object of the ``sched-*`` spaces: every two seconds its schedule submits the fire time to
# the Thread ``ticks``, where an agent records it and returns it.
scheduled_app = Application(RuntimeConfig(alarm_backoff_base_ms=50, alarm_backoff_cap_ms=1_000))


@scheduled_app.agent("tick-echo")
async def tick_echo(turn: Turn) -> Any:
    """Record the fire it was submitted for, then return it."""
    await turn.emit({"fire": turn.input["fire"]})
    return {"fire": turn.input["fire"], "attempt": turn.attempt}


@scheduled_app.every(timedelta(seconds=2), id="tick")
async def tick(ctx: ScheduleContext) -> None:
    """Each fire admits one submission, keyed by the fire."""
    await ctx.submit("ticks", {"fire": ctx.fire_ms}, agent="tick-echo")


# The object of the ``subs-*`` spaces: its agent emits records that a callable subscriber
# (small batches) and a required one consume; each keeps in this isolate what it was handed.
subscribed_app = Application(RuntimeConfig(alarm_backoff_base_ms=50, alarm_backoff_cap_ms=1_000))
#: The (thread, seq) of each record each subscriber was handed, in order (this isolate only).
DELIVERED: dict[str, list[list[Any]]] = {"mirror": [], "audit": []}


@subscribed_app.agent("emitter")
async def emitter(turn: Turn) -> Any:
    """Emit ``input["records"]`` records, then return how many."""
    count = int(turn.input["records"])
    for n in range(count):
        await turn.emit({"n": n}, kind="probe.note")
    return {"emitted": count}


@subscribed_app.subscriber("mirror", batch=2)
async def mirror(batch: list[Record]) -> None:
    DELIVERED["mirror"].append([[record.thread_id, record.seq] for record in batch])


@subscribed_app.subscriber("audit", required=True)
async def audit(batch: list[Record]) -> None:
    DELIVERED["audit"].append([[record.thread_id, record.seq] for record in batch])


THREADS_PREFIX = "/_threads/"
THREADS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS probe_effects ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, submission_id TEXT, what TEXT, at INTEGER)",
    # Every committed transition into 'settled' adds a row, even a repeated one.
    "CREATE TABLE IF NOT EXISTS probe_settlements (submission_id TEXT, from_state TEXT)",
    "CREATE TRIGGER IF NOT EXISTS probe_settle_log AFTER UPDATE OF state ON tl_submissions"
    " WHEN NEW.state = 'settled' BEGIN INSERT INTO probe_settlements (submission_id,"
    " from_state) VALUES (NEW.id, OLD.state); END",
)

PREFIX = "/_probe/"
#: ``/_drive/{space}/{thread}``: run the Thread's work now, in the app's own object.
DRIVE = "/_drive/"
#: ``/_settlements/{space}``: every committed transition into settled in the app's object.
SETTLEMENTS = "/_settlements/"
#: ``/_hold/{space}/{thread}?seconds=N``: open the Thread's event stream from this Worker, take
#: its first chunk, then hold the stream for N seconds without reading or cancelling it: a
#: consumer that stalled without the platform noticing.
HOLD = "/_hold/"
#: The API of spaces named ``probe-*`` is served, through the app's own Worker code (token,
#: ids, sizes), by ``ProbeThreadObject``: its agents can lose an uncertain step in flight.
PROBE_API = "/v1/spaces/probe-"
#: The API of spaces named ``sched-*`` is served by ``ScheduledThreadObject``.
SCHEDULED_API = "/v1/spaces/sched-"
#: The API of spaces named ``subs-*`` is served by ``SubscribedThreadObject``; what its
#: subscribers were handed is ``/_delivered/{space}``.
SUBSCRIBED_API = "/v1/spaces/subs-"
DELIVERED_PATH = "/_delivered/"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS probe_items (k TEXT PRIMARY KEY, v TEXT)",
    "CREATE TABLE IF NOT EXISTS probe_plain (id INTEGER PRIMARY KEY, v TEXT)",
    "CREATE TABLE IF NOT EXISTS probe_indexed (k TEXT PRIMARY KEY, v TEXT, w TEXT)",
    "CREATE INDEX IF NOT EXISTS probe_indexed_v ON probe_indexed (v)",
    "CREATE TABLE IF NOT EXISTS probe_alarms ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, fired_at INTEGER, retry_count INTEGER,"
    "  is_retry INTEGER, run TEXT)",
    # What the alarm handler saw of its own slot (see StorageProbe.alarm).
    "CREATE TABLE IF NOT EXISTS probe_alarm_slot ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, at_start INTEGER, rearmed_at INTEGER,"
    "  after_rearm INTEGER)",
)


class Boom(Exception):
    """Raised inside a transaction to make it roll back."""


class LostAtCommit(Exception):
    """Cuts a producer off the instant its outermost transaction commits."""


async def _pause(kind: str) -> None:
    """One of the awaits a long synchronous loop might give the object up with."""
    import js
    from pyodide.ffi import create_once_callable

    if kind == "sleep0":
        await asyncio.sleep(0)
    elif kind == "sleep1ms":
        await asyncio.sleep(0.001)
    elif kind == "microtask":
        await js.Promise.resolve(0)
    elif kind == "settimeout0":
        await js.Promise.new(create_once_callable(
            lambda resolve, reject: js.setTimeout(resolve, 0)))
    elif kind != "none":
        raise ValueError(f"no pause {kind!r}")


def now_ms() -> int:
    return int(time.time() * 1000)


class ProbeApiWorker(AppDefault):
    """The app's Worker, forwarding to ``ProbeThreadObject`` instead of the app's object."""

    binding = "PROBE_THREADS"


class ScheduledApiWorker(AppDefault):
    """The app's Worker, forwarding to ``ScheduledThreadObject``."""

    binding = "SCHEDULED_THREADS"


class SubscribedApiWorker(AppDefault):
    """The app's Worker, forwarding to ``SubscribedThreadObject``."""

    binding = "SUBSCRIBED_THREADS"


class Default(AppDefault):
    """The app's entrypoint, plus a route to the probe objects."""

    async def fetch(self, request: Any) -> Response:
        url = str(request.url)
        path = urlsplit(url).path
        if path.startswith(PROBE_API):
            return await ProbeApiWorker(self.ctx, self.env).fetch(request)
        streams = await streams_answer(self, request)
        if streams is not None:
            return streams
        if path.startswith(SCHEDULED_API):
            return await ScheduledApiWorker(self.ctx, self.env).fetch(request)
        if path.startswith(SUBSCRIBED_API):
            return await SubscribedApiWorker(self.ctx, self.env).fetch(request)
        if path.startswith(DELIVERED_PATH):
            space = path[len(DELIVERED_PATH):].split("/", 1)[0]
            answered = await self.env.SUBSCRIBED_THREADS.getByName(space).fetch(url)
            return Response(await answered.bytes(), status=answered.status,
                            headers={"content-type": "application/json"})
        if path.startswith(HOLD):
            return await self.hold(url, path)
        if path.startswith(SCHEDULES):
            return Response(json.dumps(schedules_answer(url)),
                            headers={"content-type": "application/json"})
        if path.startswith((DRIVE, SETTLEMENTS)):
            space = path.split("/")[2]
            driven = await self.env.THREADS.getByName(space).fetch(url)
            return Response(await driven.bytes(), status=driven.status,
                            headers={"content-type": "application/json"})
        if path.startswith(THREADS_PREFIX):
            name = path[len(THREADS_PREFIX) :].split("/", 1)[0]
            forwarded = await self.env.PROBE_THREADS.getByName(name).fetch(url)
        elif path.startswith(PREFIX):
            name = path[len(PREFIX) :].split("/", 1)[0]
            forwarded = await self.env.PROBE.getByName(name).fetch(url)
        else:
            return await super().fetch(request)
        return Response(
            await forwarded.bytes(),
            status=forwarded.status,
            headers={"content-type": "application/json"},
        )

    async def hold(self, url: str, path: str) -> Response:
        """Take one chunk of a Thread's event stream, then stop reading it for a while."""
        _, _, space, thread = path.split("/")[:4]
        parts = urlsplit(url)
        seconds = float(dict(parse_qsl(parts.query)).get("seconds", "5"))
        events = f"{parts.scheme}://{parts.netloc}/v1/spaces/{space}/threads/{thread}/events"
        stream = await self.env.THREADS.getByName(space).fetch(events)
        reader = stream.body.getReader()
        first = await reader.read()
        await asyncio.sleep(seconds)
        return Response.json({"status": stream.status, "first": bool(first.value)})


class ScheduledThreadObject(ThreadObjectBase):
    """The deployed object class with an ``every`` schedule; its alarm runs the fires."""

    app = scheduled_app


class SubscribedThreadObject(ThreadObjectBase):
    """The deployed object class with two subscribers; its alarm delivers to them."""

    app = subscribed_app

    async def fetch(self, request: Any) -> Response:
        if urlsplit(str(request.url)).path.startswith(DELIVERED_PATH):
            return Response(json.dumps(DELIVERED), headers={"content-type": "application/json"})
        return await super().fetch(request)


class ProbeThreadObject(ThreadObjectBase):
    """The deployed object class with test-only agents; its alarm is the only engine."""

    app = threads_app

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        EFFECTS["storage"] = self.storage
        #: In the order they happened: ("pass-start", n), ("pass-end", n) of each alarm's
        #: pass, and ("admitted", n or None) when an API admission is answered (n: the pass
        #: running then).
        self.events: list[tuple[str, int | None]] = []
        self.passes = 0
        self.running: int | None = None

    async def alarm(self, alarm_info: Any = None) -> None:
        self.passes += 1
        self.running = number = self.passes
        self.events.append(("pass-start", number))
        try:
            await super().alarm(alarm_info)
        finally:
            self.running = None
            self.events.append(("pass-end", number))

    async def fetch(self, request: Any) -> Response:
        url = urlsplit(str(request.url))
        if not url.path.startswith(THREADS_PREFIX):
            answer = await super().fetch(request)
            if str(request.method).upper() == "POST" and url.path.endswith("/submissions"):
                self.events.append(("admitted", self.running))
            return answer
        op = url.path[len(THREADS_PREFIX) :].split("/", 2)[1]
        args = dict(parse_qsl(url.query))
        for statement in THREADS_SCHEMA:
            self.storage.exec(statement)
        ledger = self.space.runtime.ledger
        if op == "install":  # the test-only tables and trigger above, before any run
            body: dict[str, Any] = {}
        elif op == "seed":  # ``n`` submissions, one Thread each, in one transaction
            def seed() -> list[str]:
                return [ledger.admit(f"{args['prefix']}-{i}", args["agent"],
                                     json.loads(args["input"])).submission.id
                        for i in range(int(args["n"]))]

            body = {"ids": self.storage.transaction(seed)}
        elif op == "passes":  # no SQL: answered at once whenever the object is given a turn
            body = {"running": self.running, "passes": self.passes, "events": self.events}
        elif op == "admit":
            admitted = ledger.admit(args["thread"], args["agent"], json.loads(args["input"]))
            body = {"id": admitted.submission.id}
        elif op == "status":
            sub = ledger.get(args["id"])
            body = {
                "state": str(sub.state),
                "outcome": None if sub.outcome is None else str(sub.outcome),
                "result": sub.result,
                "attempts": sub.attempts,
                "settlements": [
                    row["from_state"]
                    for row in self.storage.exec(
                        "SELECT from_state FROM probe_settlements WHERE submission_id = ?",
                        sub.id,
                    )
                ],
                "effects": [
                    row["what"]
                    for row in self.storage.exec(
                        "SELECT what FROM probe_effects WHERE submission_id = ? ORDER BY seq",
                        sub.id,
                    )
                ],
                "alarm": await self.storage.get_alarm(),
                "run": str(getattr(self.env, "PROBE_RUN", None) or ""),
            }
        else:
            return Response.json({"error": f"no op {op}"}, status=404)
        return Response(json.dumps(body), headers={"content-type": "application/json"})


# The app's agents and configuration, but idle event streams send a heartbeat every second, so
# a test sees a stream whose client left being freed (the runtime notices at the next write).
driven_app = Application(entry_app.config.model_copy(update={"sse_heartbeat_ms": 1_000}))
driven_app.agents = entry_app.agents


@driven_app.agent("relay")
async def relay(turn: Turn) -> Any:
    """Sends ``{"text"}`` to ``echo`` on ``{"space", "thread"}`` of its input (messages)."""
    target = turn.input
    sent = await turn.send(target["space"], target["thread"], {"text": target["text"]},
                           agent=target.get("agent", "echo"))
    return {"sent": sent}


class ThreadObject(AppThreadObject):
    """The app's object, plus ``/_drive/``: recovery and head Attempts of one Thread until
    nothing changes, as a maintenance pass would run them (test-only). It answers how many runs
    it settled, the open event streams, and the rows this incarnation wrote before the drive
    (workerd's billed count), so a test can tell that the requests between two drives wrote
    nothing."""

    app = driven_app

    async def fetch(self, request: Any) -> Response:
        path = urlsplit(str(request.url)).path
        if path.startswith(SETTLEMENTS):
            return Response.json(self.settlements())
        if not path.startswith(DRIVE):
            return await super().fetch(request)
        thread = path[len(DRIVE) :].split("/")[1]
        written = self.storage.meter.reading().rows_written
        runtime = self.space.runtime
        settled = 0
        for _ in range(20):
            before = runtime.ledger.thread_open(thread)
            runtime.run_recovery(thread)
            if await runtime.process_thread_head(thread) is not None:
                settled += 1
            if runtime.ledger.thread_open(thread) == before:
                break
        return Response.json({"settled": settled, "subscribers": len(self.space.api.subscribers),
                              "rows_written": written})

    def settlements(self) -> dict[str, list[str]]:
        """Install the settlement log (idempotent), then return it: for each submission, the
        state of every committed transition into settled, so a repeated one shows."""
        for statement in THREADS_SCHEMA:
            self.storage.exec(statement)
        log: dict[str, list[str]] = {}
        for row in self.storage.exec("SELECT submission_id, from_state FROM probe_settlements"):
            log.setdefault(row["submission_id"], []).append(row["from_state"])
        return log


class StorageProbe(DurableObject):
    """Runs one storage experiment per request and answers with what it saw."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.storage = CloudflareStorage(ctx.storage)
        for statement in SCHEMA:
            self.storage.exec(statement)

    async def fetch(self, request: Any) -> Response:
        url = urlsplit(str(request.url))
        op = url.path[len(PREFIX) :].split("/", 2)[1].replace("-", "_")
        args = dict(parse_qsl(url.query))
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return Response.json({"error": f"no op {op}"}, status=404)
        try:
            result = await handler(**args)
        except Exception as exc:
            return Response.json({"error": f"{type(exc).__name__}: {exc}"}, status=500)
        return Response(json.dumps(result), headers={"content-type": "application/json"})

    async def alarm(self, alarm_info: Any = None) -> None:
        """Record the run: when, workerd's alarm_info, and which runtime process (PROBE_RUN)."""
        retry = int(alarm_info.retryCount)
        is_retry = bool(alarm_info.isRetry)
        run = str(getattr(self.env, "PROBE_RUN", None) or "")
        self.storage.exec(
            "INSERT INTO probe_alarms (fired_at, retry_count, is_retry, run) VALUES (?, ?, ?, ?)",
            now_ms(),
            retry,
            int(is_retry),
            run,
        )
        print(f"probe alarm fired (retry {retry}, run {run!r})")
        # The slot as the platform reports it to the handler (not the adapter's view), and,
        # when a ``rearm`` item asks for it, after the handler writes the slot itself.
        raw = self.storage._storage
        at_start = await raw.getAlarm()
        rearm = self.storage.exec("SELECT v FROM probe_items WHERE k = 'rearm'").first()
        rearmed_at = after_rearm = None
        if rearm is not None:
            self.storage.exec("DELETE FROM probe_items WHERE k = 'rearm'")
            rearmed_at = now_ms() + int(rearm["v"])
            self.storage.set_alarm(rearmed_at)
            after_rearm = await raw.getAlarm()
        self.storage.exec(
            "INSERT INTO probe_alarm_slot (at_start, rearmed_at, after_rearm) VALUES (?, ?, ?)",
            None if is_js_null(at_start) else int(at_start), rearmed_at,
            None if is_js_null(after_rearm) else int(after_rearm),
        )

    def count(self, table: str) -> int:
        return int(self.storage.exec(f"SELECT COUNT(*) AS n FROM {table}").scalar())

    async def state(self) -> dict[str, Any]:
        return {
            "items": self.count("probe_items"),
            "alarm": await self.storage.get_alarm(),
            "known_alarm": self.storage.known_alarm(),
        }

    # -- experiments ---------------------------------------------------------------------

    async def op_reset(self) -> dict[str, Any]:
        self.storage.transaction(
            lambda: (
                self.storage.exec("DELETE FROM probe_items"),
                self.storage.exec("DELETE FROM probe_alarms"),
                self.storage.delete_alarm(),
            )
        )
        return await self.state()

    async def op_rollback(self, alarm_in: str) -> dict[str, Any]:
        """Insert a row and write the alarm in one transaction that then raises."""
        due = now_ms() + 3_600_000

        def body() -> None:
            self.storage.exec("INSERT INTO probe_items (k, v) VALUES ('rolled', 'back')")
            if alarm_in == "inside":
                self.storage.set_alarm(due)
            raise Boom("roll back")

        raised = None
        try:
            self.storage.transaction(body)
        except Boom as exc:
            raised = type(exc).__name__
        if alarm_in == "after":
            # Written right after transactionSync returned (here: raised), in the same turn.
            self.storage.set_alarm(due)
        return {"raised": raised, "due": due, **await self.state()}

    async def op_commit(self, alarm_in: str, delay_ms: str = "3600000") -> dict[str, Any]:
        """Insert a row and write the alarm, inside or right after one transaction."""
        due = now_ms() + int(delay_ms)

        def body() -> None:
            self.storage.exec("INSERT OR REPLACE INTO probe_items (k, v) VALUES ('kept', 'row')")
            if alarm_in == "inside":
                self.storage.set_alarm(due)

        self.storage.transaction(body)
        if alarm_in == "after":
            self.storage.set_alarm(due)
        return {"due": due, **await self.state()}

    async def op_nested(self) -> dict[str, Any]:
        """A caught failure in a nested transaction drops only the inner writes."""
        outer_due = now_ms() + 3_600_000
        inner_due = outer_due + 60_000

        def inner() -> None:
            self.storage.exec("INSERT INTO probe_items (k, v) VALUES ('inner', 'x')")
            self.storage.set_alarm(inner_due)
            raise Boom("inner")

        def outer() -> None:
            self.storage.exec("INSERT INTO probe_items (k, v) VALUES ('outer', 'x')")
            self.storage.set_alarm(outer_due)
            with contextlib.suppress(Boom):
                self.storage.transaction(inner)

        self.storage.transaction(outer)
        keys = [row["k"] for row in self.storage.exec("SELECT k FROM probe_items ORDER BY k")]
        return {"keys": keys, "outer_due": outer_due, "inner_due": inner_due, **await self.state()}

    async def op_nulls(self) -> dict[str, Any]:
        """JS null in rows, parameters and the alarm slot comes back as None."""
        raw_storage = getattr(self.ctx.storage, "_binding", self.ctx.storage)
        raw_cursor = raw_storage.sql.exec("SELECT NULL AS n")
        raw_value = next(iter(raw_cursor)).n
        del raw_cursor
        self.storage.delete_alarm()
        row = self.storage.exec("SELECT NULL AS n, ? AS p, 7 AS seven", None).one()
        return {
            "raw_is_jsnull": raw_value is jsnull,
            "row": row,
            "types": {key: type(value).__name__ for key, value in row.items()},
            "alarm": await self.storage.get_alarm(),
        }

    async def op_meter(self) -> dict[str, Any]:
        """The meter's figures are workerd's billed rowsRead/rowsWritten."""
        self.storage.exec("DELETE FROM probe_indexed")
        self.storage.exec("DELETE FROM probe_plain")
        figures: dict[str, Any] = {}
        statements = {
            "insert_rowid_table": ("INSERT INTO probe_plain (v) VALUES ('x')", ()),
            "insert_explicit_rowid": ("INSERT INTO probe_plain (id, v) VALUES (7, 'x')", ()),
            "insert_text_key": ("INSERT OR REPLACE INTO probe_items (k, v) VALUES ('m', '1')", ()),
            "insert_indexed": ("INSERT INTO probe_indexed (k, v, w) VALUES ('a', 'x', 'y')", ()),
            "update_plain_column": ("UPDATE probe_indexed SET w = 'z' WHERE k = 'a'", ()),
            "update_indexed_column": ("UPDATE probe_indexed SET v = 'q' WHERE k = 'a'", ()),
            "select_by_key": ("SELECT v FROM probe_indexed WHERE k = ?", ("a",)),
            "delete_by_key": ("DELETE FROM probe_indexed WHERE k = 'a'", ()),
        }
        for name, (sql, params) in statements.items():
            before = self.storage.meter.reading()
            rows = self.storage.exec(sql, *params)
            delta = self.storage.meter.reading() - before
            changed = rows.changed
            asked = self.storage.meter.reading() - before
            figures[name] = {
                "rows": [rows.rows_read, rows.rows_written],
                "changed": changed,
                "meter": [delta.rows_read, delta.rows_written],
                "statements": delta.statements,
                "statements_once_asked": asked.statements,
                "approximate": delta.approximate,
            }
        # A count asked for after a later statement is refused, never another statement's.
        late = self.storage.exec("UPDATE probe_plain SET v = 'y' WHERE id = 7")
        self.storage.exec("SELECT 1 AS n")
        try:
            figures["late_count"] = {"changed": late.changed}
        except Exception as exc:
            figures["late_count"] = {"refused": type(exc).__name__}
        return figures

    async def op_gate(
        self, fail: str, lane: str = "probe.lane", lose_at_commit: str = "0"
    ) -> dict[str, Any]:
        """One ``gate.mutate``: a fact, its lane enrollment, the generation and the alarm.

        With ``lose_at_commit=1`` the mutation is cut off the instant its outermost
        transaction commits (nothing after the commit runs), and the state reported is what
        that commit alone left: no restart, no ``ensure_alarm()``.
        """
        migrate(self.storage)
        await self.storage.get_alarm()
        scheduler = build_scheduler(self.storage, SystemClock(), RuntimeConfig(), random.Random(0))
        key = f"gate-fact-{fail}-{lose_at_commit}"
        dirty_before = read_state(self.storage).dirty

        def body() -> None:
            self.storage.exec("INSERT OR REPLACE INTO probe_items (k, v) VALUES (?, 'fact')", key)
            if fail == "1":
                raise Boom("the body failed")

        real_transaction = self.storage.transaction

        def cut_at_commit(fn: Any) -> Any:
            outermost = not self.storage.in_transaction()
            result = real_transaction(fn)
            if outermost:
                raise LostAtCommit("lost at commit")
            return result

        raised = None
        before = self.storage.meter.reading()
        if lose_at_commit == "1":
            self.storage.transaction = cut_at_commit  # type: ignore[method-assign]
        try:
            scheduler.gate.mutate(body, lanes=[lane])
        except (Boom, LostAtCommit) as exc:
            raised = type(exc).__name__
        finally:
            self.storage.transaction = real_transaction  # type: ignore[method-assign]
        mutate_cost = self.storage.meter.reading() - before
        before = self.storage.meter.reading()
        earliest = scheduler.due_queue.next()
        next_cost = self.storage.meter.reading() - before
        lanes = {}
        for name in (lane, NATIVE):
            row = scheduler.due_queue.get(name)
            lanes[name] = None if row is None else {"due_at": row.due_at, "state": str(row.state)}
        return {
            "raised": raised,
            "fact": self.count_where("probe_items", key),
            "lanes": lanes,
            "earliest_due": earliest,
            "dirty_before": dirty_before,
            "dirty_after": read_state(self.storage).dirty,
            "now": now_ms(),
            "min_delay": RuntimeConfig().min_alarm_delay_ms,
            "mutate_cost": [mutate_cost.rows_read, mutate_cost.rows_written],
            "mutate_alarm_writes": mutate_cost.alarm_writes,
            "next_cost": [next_cost.rows_read, next_cost.rows_written],
            **await self.state(),
        }

    async def op_one_step(self, thread: str) -> dict[str, Any]:
        """Admit a one-step submission and run it to settlement; report the billed cost."""
        runtime = await self.thread_runtime()
        before = self.storage.meter.reading()
        admitted = runtime.ledger.admit(thread, "echo", 41).submission
        admit_cost = self.storage.meter.reading() - before
        settlement = await runtime.process_thread_head(thread)
        cost = self.storage.meter.reading() - before
        stored = runtime.ledger.get(admitted.id)
        return {
            "outcome": None if settlement is None else str(settlement.outcome),
            "result": None if settlement is None else settlement.result,
            "state": str(stored.state),
            "admit_cost": [admit_cost.rows_read, admit_cost.rows_written],
            "cost": [cost.rows_read, cost.rows_written],
            "alarm_writes": cost.alarm_writes,
            "statements": cost.statements,
        }

    async def op_lifecycle(self) -> dict[str, Any]:
        """Approval, retry, abort and idempotent admission through CloudflareStorage."""
        runtime = await self.thread_runtime()
        ledger = runtime.ledger
        seen: dict[str, Any] = {}

        reviewed_id = ledger.admit("review", "reviewed", "notes").submission.id
        await runtime.process_thread_head("review")
        seen["before_approval"] = str(ledger.get(reviewed_id).state)
        ledger.decide_approval(reviewed_id, "publish", approved=True)
        settled = await runtime.process_thread_head("review")
        seen["reviewed"] = None if settled is None else [str(settled.outcome), settled.result]
        seen["history"] = [
            row["kind"]
            for row in self.storage.exec(
                "SELECT kind FROM tl_history WHERE thread_id = 'review' ORDER BY seq"
            )
        ]

        flaky_id = ledger.admit("flaky", "flaky", None).submission.id
        first = await runtime.process_thread_head("flaky")
        seen["flaky_after_first"] = [first, str(ledger.get(flaky_id).state)]
        deadline = now_ms() + 2_000
        second = None
        while second is None and now_ms() < deadline:
            await asyncio.sleep(0.005)
            second = await runtime.process_thread_head("flaky")
        seen["flaky"] = None if second is None else [str(second.outcome), second.result]

        queued = [ledger.admit("abort", "echo", n).submission.id for n in range(2)]
        ledger.request_abort(queued[1], "no longer needed")
        head = await runtime.process_thread_head("abort")
        seen["abort"] = [
            None if head is None else str(head.outcome),
            str(ledger.get(queued[1]).state),
            None if ledger.get(queued[1]).outcome is None else str(ledger.get(queued[1]).outcome),
        ]

        again = ledger.admit("review", "reviewed", "notes", "key-1")
        replay = ledger.admit("review", "reviewed", "notes", "key-1")
        seen["idempotent"] = [
            again.created,
            replay.created,
            again.submission.id == replay.submission.id,
        ]
        seen["open"] = len(ledger.scan_nonterminal())
        return seen

    async def op_hardening(self, agent: str, thread: str) -> dict[str, Any]:
        """Run ``agent``'s submission until it leaves the runnable states (at most 8 Attempts)."""
        app = probe_app if agent == "over-limit" else hardening_app
        runtime = await self.thread_runtime(app)
        admitted = runtime.ledger.admit(thread, agent, None).submission
        attempts: list[Any] = []
        for _ in range(8):
            try:
                settled = await runtime.process_thread_head(thread)
            except Exception as exc:  # escaping process_thread_head is the defect itself
                attempts.append(f"raised {type(exc).__name__}: {str(exc)[:200]}")
                break
            state = runtime.ledger.get(admitted.id).state
            attempts.append(str(settled.outcome) if settled is not None else str(state))
            if str(state) in ("settled", "unknown", "running"):
                break
            await asyncio.sleep(0.005)  # past the 1-2 ms backoff
        stored = runtime.ledger.get(admitted.id)
        journal = {
            row["step_key"]: row["state"]
            for row in self.storage.exec(
                "SELECT step_key, state FROM tl_journal WHERE submission_id = ?", admitted.id
            )
        }
        return {
            "attempts": attempts,
            "state": str(stored.state),
            "outcome": None if stored.outcome is None else str(stored.outcome),
            "error": stored.error,
            "runs": hardening_runs.get(thread, 0),
            "journal": journal,
            "attempts_charged": stored.attempts,
        }

    async def op_failures(self, thread: str) -> dict[str, Any]:
        """Run a submission that fails every Attempt until it settles; what it keeps of them
        (written by the JSON functions of workerd's SQLite)."""
        runtime = await self.thread_runtime(failing_app)
        admitted = runtime.ledger.admit(thread, "fails", None).submission
        for _ in range(failing_app.config.max_attempts):
            await runtime.process_thread_head(thread)
            await asyncio.sleep(0.005)  # past the 1-2 ms backoff
        stored = runtime.ledger.get(admitted.id)
        return {
            "state": str(stored.state),
            "failures": stored.failures,
            "kept": [[f.attempt, f.message, f.final, f.retry_at is not None]
                     for f in stored.failed_attempts],
        }

    async def thread_runtime(self, app: Application = probe_app) -> ThreadRuntime:
        """A thread runtime over this object's storage, as one incarnation would build it."""
        migrate(self.storage)
        await self.storage.get_alarm()
        rng = random.SystemRandom()
        scheduler = build_scheduler(self.storage, SystemClock(), app.config, rng)
        return ThreadRuntime(
            self.storage,
            app.agents,
            gate=scheduler.gate,
            failpoints=scheduler.failpoints,
            config=app.config,
            clock=SystemClock(),
            rng=rng,
            ids=RandomIds(rng),
        )

    def count_where(self, table: str, key: str) -> int:
        rows = self.storage.exec(f"SELECT COUNT(*) AS n FROM {table} WHERE k = ?", key)
        return int(rows.scalar())

    async def op_lean_submissions(self) -> dict[str, Any]:
        """Rows written before the tl_submissions rebuild, read back after it.

        The rebuild drops and recreates a table that other tables reference, inside one
        transaction where workerd enforces foreign keys and lets no one switch them off.
        """
        rebuild = MIGRATIONS.index(schema_module._LEAN_SUBMISSIONS)
        migrate(self.storage, target=rebuild)
        states = ["queued", "running", "suspended", "unknown", "settled"]
        self.storage.exec(
            "INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
        for seq, state in enumerate(states, start=1):
            settled = state == "settled"
            self.storage.exec(
                "INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key,"
                " input_json, input_digest, state, outcome, created_at, updated_at, settled_at)"
                " VALUES (?, 't', ?, 'echo', ?, '{}', 'd', ?, ?, 1, 1, ?)",
                f"s{seq}", seq, "k" if seq == 1 else None, state,
                "completed" if settled else None, 2 if settled else None)
            self.storage.exec(
                "INSERT INTO tl_journal (submission_id, step_key, position, effect, state,"
                " attempt, started_at) VALUES (?, 'step', 0, 'idempotent', 'started', 1, 5)",
                f"s{seq}")
        self.storage.exec(
            "INSERT INTO tl_waits (id, submission_id, kind, wait_key, state, wake_at,"
            " created_at) VALUES ('w', 's3', 'timer', 'nap', 'open', 50, 5)")
        self.storage.exec("INSERT INTO tl_abort_intents (submission_id, state, requested_at)"
                          " VALUES ('s2', 'accepted', 6)")
        before = self.storage.exec("SELECT * FROM tl_submissions ORDER BY id").rows
        steps = migrate(self.storage)
        after = self.storage.exec("SELECT * FROM tl_submissions ORDER BY id").rows
        # In the event that migrated too, a delete that would orphan children is refused at
        # once, not deferred to the event's commit (where it would reset the object).
        refused_now = (await self.op_delete_submission("s3"))["refused"]
        orphans = self.storage.exec(
            "SELECT (SELECT COUNT(*) FROM tl_journal j LEFT JOIN tl_submissions s"
            " ON s.id = j.submission_id WHERE s.id IS NULL)"
            " + (SELECT COUNT(*) FROM tl_waits w LEFT JOIN tl_submissions s"
            " ON s.id = w.submission_id WHERE s.id IS NULL) AS n").scalar()
        return {
            "steps": steps,
            "version": schema_version(self.storage),
            # Columns later migrations add (``dormant``, the loss counters) are not compared.
            "kept": [{k: v for k, v in row.items() if k in before[0]} for row in after]
            == before,
            "dormant": {row["state"]: row["dormant"] for row in after},
            "orphans": orphans,
            "refused_now": refused_now,
            "leftovers": [row["name"] for row in self.storage.exec(
                "SELECT name FROM sqlite_master WHERE name = 'tl_submissions_copy'")],
            "indexes": {row["name"]: row["sql"] for row in self.storage.exec(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index'"
                " AND tbl_name = 'tl_submissions' AND sql IS NOT NULL")},
        }

    async def op_orphaning_rebuild(self) -> dict[str, Any]:
        """The rebuild, with a copy-back that loses the submission a journal entry hangs on."""
        rebuild = MIGRATIONS.index(schema_module._LEAN_SUBMISSIONS)
        migrate(self.storage, target=rebuild)
        self.storage.exec(
            "INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
        for seq in (1, 2):
            self.storage.exec(
                "INSERT INTO tl_submissions (id, thread_id, seq, agent, input_json,"
                " input_digest, state, created_at, updated_at)"
                " VALUES (?, 't', ?, 'echo', '{}', 'd', 'running', 1, 1)", f"s{seq}", seq)
        self.storage.exec(
            "INSERT INTO tl_journal (submission_id, step_key, position, effect, state,"
            " attempt, started_at) VALUES ('s1', 'step', 0, 'idempotent', 'started', 1, 5)")
        patched = list(MIGRATIONS)
        patched[rebuild] = tuple(
            f"{statement} WHERE id <> 's1'"
            if statement.startswith("INSERT INTO tl_submissions ") else statement
            for statement in MIGRATIONS[rebuild])
        schema_module.MIGRATIONS = patched
        try:
            migrate(self.storage)
        except Exception as exc:
            raised: str | None = f"{type(exc).__name__}: {exc}"
        else:
            raised = None
        finally:
            schema_module.MIGRATIONS = MIGRATIONS
        return {"raised": raised, **self.submissions_and_journal()}

    async def op_submissions_and_journal(self) -> dict[str, Any]:
        """The schema version and the rows of tl_submissions and tl_journal."""
        return self.submissions_and_journal()

    def submissions_and_journal(self) -> dict[str, Any]:
        return {
            "version": schema_version(self.storage),
            "submissions": [row["id"] for row in self.storage.exec(
                "SELECT id FROM tl_submissions ORDER BY id")],
            "journal": [row["submission_id"] for row in self.storage.exec(
                "SELECT submission_id FROM tl_journal ORDER BY submission_id")],
        }

    async def op_seed_settled_history(self, count: str, outbox: str = "2") -> dict[str, Any]:
        """An object at the version before the submissions rebuild, with ``count`` settled
        submissions on one Thread and ``outbox`` outbox records for each."""
        rebuild = MIGRATIONS.index(schema_module._LEAN_SUBMISSIONS)
        migrate(self.storage, target=rebuild)
        self.storage.exec(
            "INSERT INTO tl_threads (id, created_at, updated_at) VALUES ('t', 1, 1)")
        self.storage.exec(
            "WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key,"
            " input_json, input_digest, state, outcome, result_json, attempts, revision,"
            " created_at, updated_at, settled_at)"
            " SELECT 'sub_' || i, 't', i, 'echo', 'key_' || i, '{\"n\":' || i || '}', 'd' || i,"
            " 'settled', 'completed', '\"ok\"', 1, 3, i, i, i FROM n",
            int(count))
        self.storage.exec(
            "WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO tl_outbox (record_id, thread_id, kind, body_json, state, created_at,"
            " delivered_at) SELECT 'rec_' || i, 't', 'record', '{}', 'delivered', i, i FROM n",
            int(count) * int(outbox))
        return {
            "version": schema_version(self.storage),
            "submissions": self.count("tl_submissions"),
            "outbox": self.count("tl_outbox"),
        }

    async def op_timed_migrate(self) -> dict[str, Any]:
        """Migrate to the latest version in this event; the object's clock and billed rows."""
        before = self.storage.meter.reading()
        started = time.time()
        steps = migrate(self.storage)
        elapsed_ms = (time.time() - started) * 1000
        spent = self.storage.meter.reading() - before
        return {
            "steps": steps,
            "version": schema_version(self.storage),
            "object_clock_ms": elapsed_ms,
            "rows_read": spent.rows_read,
            "rows_written": spent.rows_written,
            "statements": spent.statements,
            "submissions": self.count("tl_submissions"),
            # The one-log migration drops the outbox: None once it is gone.
            "outbox": self.count("tl_outbox") if self.storage.exec(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tl_outbox'"
            ).first() else None,
        }

    async def op_delete_submission(self, submission_id: str) -> dict[str, Any]:
        """Try to delete a submission in a transaction; report the error, if any."""
        try:
            self.storage.transaction(
                lambda: self.storage.exec("DELETE FROM tl_submissions WHERE id = ?",
                                          submission_id))
        except Exception as exc:
            return {"refused": str(exc)}
        return {"refused": None}

    async def op_arm_rearming(self, delay_ms: str, rearm_ms: str) -> dict[str, Any]:
        """Arm the slot ``delay_ms`` ahead; its handler then arms it ``rearm_ms`` ahead."""
        due = now_ms() + int(delay_ms)

        def body() -> None:
            self.storage.exec(
                "INSERT OR REPLACE INTO probe_items (k, v) VALUES ('rearm', ?)", str(rearm_ms))
            self.storage.set_alarm(due)

        self.storage.transaction(body)
        return {"due": due, **await self.state()}

    async def op_alarm_slots(self) -> dict[str, Any]:
        """What each run of ``alarm()`` saw of the slot, and the slot now."""
        rows = self.storage.exec(
            "SELECT at_start, rearmed_at, after_rearm FROM probe_alarm_slot ORDER BY seq")
        return {"seen": list(rows), **await self.state()}

    async def op_spin(self, kind: str, rounds: str, work: str) -> dict[str, Any]:
        """Keep the object busy for ``rounds`` rounds of ``work`` synchronous statements each,
        awaiting ``kind`` between rounds (see :func:`_pause`); meanwhile ``op_peek`` says
        whether a request was delivered while the spin ran."""
        self.spinning = True
        self.spun = 0
        try:
            for _ in range(int(rounds)):
                for _ in range(int(work)):
                    self.storage.exec("SELECT 1 AS n")
                self.spun += 1
                await _pause(kind)
        finally:
            self.spinning = False
        return {"rounds": self.spun}

    async def op_timers(self, clock: str, n: str) -> dict[str, Any]:
        """Start and cancel ``n`` timers of ``clock`` (``system`` or ``workers``, the deployed
        one) in this one request, as a pass of ``n`` Attempts does; how many were made."""
        made = SystemClock() if clock == "system" else WorkersClock()
        for _ in range(int(n)):
            timer = made.timer(made.now_ms() + 600_000)
            timer.cancel()
            await asyncio.sleep(0)  # the done callbacks run
        return {"timers": int(n)}

    async def op_peek(self) -> dict[str, Any]:
        """Whether a spin is running now, and how many of its rounds are done."""
        return {"spinning": getattr(self, "spinning", False), "spun": getattr(self, "spun", 0)}

    async def op_alarms(self) -> dict[str, Any]:
        """The rows ``alarm()`` wrote so far."""
        rows = self.storage.exec(
            "SELECT fired_at, retry_count, is_retry, run FROM probe_alarms ORDER BY seq"
        )
        return {"fired": list(rows), **await self.state()}


__all__ = [
    "CappedThreadObject",
    "Default",
    "MeasuredThreadObject",
    "ProbeThreadObject",
    "StorageProbe",
    "ThreadObject",
]
