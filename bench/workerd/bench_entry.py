"""Bench-only Worker: the deployed object class running the benchmark's agents, metered.

Never deployed. ``/_bench/{object}/{op}`` goes to a ``BenchThreadObject`` (binding ``BENCH``):
``ThreadObjectBase`` unchanged, with the agents of ``bench_app`` and a few bench routes that
admit or seed submissions and read what each alarm cost (workerd's billed ``rowsRead`` /
``rowsWritten`` per statement, alarm writes, the pass report). The HTTP API (``/v1``) is the
app's ``Default`` with its spaces bound to ``BenchThreadObject`` too, so that the alarms the API's
submissions cause are the metered ones (a space and a bench object of the same name are one
object). The bench object also registers the app's ``echo`` and ``chat`` agents for the API
scenarios.

Scenario 8's objects are the same bench object over ``bench_app.schedule_app``: one class (and
binding) per application, as a Durable Object class has one app; ``/_bench/{name}/...`` reaches
them by the object names of ``bench_app.FIRES``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from bench_app import FIRES, SUBSCRIBED, schedule_app, subscriber_app
from bench_app import app as bench_app
from bench_meter import StatementLog
from pyodide.ffi import jsnull
from workers import Response

from entry import Default as AppDefault
from entry import ThreadObject, chat, echo
from threadline.clock import SystemClock
from threadline.worker import ThreadObjectBase, yield_to_events

PREFIX = "/_bench/"
_OPEN_TIMERS = "SELECT COUNT(*) AS n FROM tl_waits WHERE state = 'open' AND kind = 'timer'"
_OPEN = "SELECT COUNT(*) AS n FROM tl_submissions WHERE state <> 'settled'"
_STATE = "SELECT state FROM tl_submissions WHERE id = ?"
_SCHEDULED = "SELECT COUNT(*) AS n FROM tl_delayed"
# The schedules that have fired, with their last fire (only ``pulse`` fires while the bench runs).
_FIRED = "SELECT id, last_fire FROM tl_schedules WHERE last_fire IS NOT NULL"
#: Scenario 8's object names -> their bindings.
_FIRES_BINDINGS = {name: binding for name, binding, _ in (*FIRES.values(), SUBSCRIBED)}

# The example Worker's agents, unchanged, for the scenarios that go through the HTTP API.
bench_app.agent("echo")(echo)
bench_app.agent("chat")(chat)


class Default(AppDefault):
    """The app's entrypoint, plus the bench route; every space is a ``BenchThreadObject``."""

    binding = "BENCH"

    async def fetch(self, request: Any) -> Response:
        url = str(request.url)
        path = urlsplit(url).path
        if not path.startswith(PREFIX):
            return await super().fetch(request)
        name = path[len(PREFIX) :].split("/", 1)[0]
        binding = getattr(self.env, _FIRES_BINDINGS.get(name, "BENCH"))
        forwarded = await binding.getByName(name).fetch(url)
        return Response(
            await forwarded.bytes(),
            status=forwarded.status,
            headers={"content-type": "application/json"},
        )


_SCRATCH = ("CREATE TABLE IF NOT EXISTS bench_scratch (id INTEGER PRIMARY KEY, v INTEGER, "
            "body TEXT)")
_ROW10 = ("SELECT 'sub-0123456789' AS id, 't1' AS thread_id, 'echo' AS agent, 'queued' AS state,"
          " 1 AS seq, 2 AS attempts, NULL AS outcome, '{\"text\": \"hi\"}' AS input_json,"
          " 1700000000000 AS created_at, 1700000000001 AS updated_at")
_RECORD = {"role": "assistant", "text": "hello there", "meta": {"n": 1, "ok": True},
           "submission_id": "sub-0123456789", "thread_id": "t1", "seq": 12}


def _raw_exec(obj: Any) -> None:
    obj.storage._sql.exec("SELECT 1 AS n")


def _exec_select(obj: Any) -> None:
    obj.log.unmetered_exec("SELECT 1 AS n")


def _exec_row10(obj: Any) -> None:
    obj.log.unmetered_exec(_ROW10)


def _exec_update(obj: Any) -> None:
    obj.log.unmetered_exec("INSERT OR REPLACE INTO bench_scratch (id, v) VALUES (1, 1)")


def _changes(obj: Any) -> None:
    obj.storage._sql.exec("SELECT changes() AS n").toArray()


def _transaction(obj: Any) -> None:
    obj.storage.transaction(lambda: None)


def _json(obj: Any) -> None:
    json.loads(json.dumps(_RECORD, sort_keys=True, separators=(",", ":")))


def _now(obj: Any) -> None:
    obj.space.clock.now_ms()


def _nothing(obj: Any) -> None:
    return None


async def _hop(obj: Any) -> None:
    await asyncio.sleep(0)


async def _task(obj: Any) -> None:
    async def nothing() -> None:
        return None

    await asyncio.ensure_future(nothing())


async def _wait_first(obj: Any) -> None:
    # What bounding an agent by a timer costs: two futures, one wait, a cancel.
    async def nothing() -> None:
        return None

    work = asyncio.ensure_future(nothing())
    timer = asyncio.ensure_future(asyncio.sleep(3600))
    await asyncio.wait((work, timer), return_when=asyncio.FIRST_COMPLETED)
    timer.cancel()


async def _pause(obj: Any) -> None:
    # What the pass's pause between Attempts costs when no request is waiting.
    await yield_to_events()


async def _timer_cancelled(obj: Any) -> None:
    # An Attempt's timeout timer, cancelled when the agent ends first.
    clock = SystemClock()
    timer = clock.timer(clock.now_ms() + 600_000)
    timer.cancel()
    await asyncio.sleep(0)


async def _sleep_cancelled(obj: Any) -> None:
    # The same bound as a task sleeping on the event loop, cancelled.
    sleeping = asyncio.ensure_future(asyncio.sleep(600))
    await asyncio.sleep(0)
    sleeping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sleeping


#: Pieces that await, repeated the same way.
ASYNC_UNITS = {"asyncio_hop": _hop, "task_spawn": _task, "wait_first": _wait_first,
               "pause": _pause, "timer_cancelled": _timer_cancelled,
               "sleep_cancelled": _sleep_cancelled}

#: The pieces ``op_unit_cost`` repeats, by name.
UNITS = {
    "nothing": _nothing,
    "raw_exec": _raw_exec,
    "exec_select": _exec_select,
    "exec_row10": _exec_row10,
    "exec_write": _exec_update,
    "changes": _changes,
    "transaction": _transaction,
    "json_roundtrip": _json,
    "clock_now": _now,
}


def _now_ms() -> int:
    return int(time.time() * 1000)


class BenchThreadObject(ThreadObjectBase):
    """The deployed object with the bench agents; each alarm's cost is kept in memory."""

    app = bench_app

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.log = StatementLog(self.storage)
        #: One entry per alarm handler run by this incarnation.
        self.alarms: list[dict[str, Any]] = []
        #: Transactions begun (outermost and nested), for the profile of a pass.
        self.transactions = 0
        transaction = self.storage.transaction

        def counted(fn: Any) -> Any:
            self.transactions += 1
            return transaction(fn)

        self.storage.transaction = counted  # type: ignore[method-assign]

    async def alarm(self, alarm_info: Any = None) -> None:
        """The deployed alarm, with its storage cost recorded (and, unmetered, how many
        delayed submissions its pass admitted and which schedules fired in it)."""
        started = _now_ms()
        transactions = self.transactions
        changes_read = getattr(self.storage, "changes_read", 0)
        waiting = self._scheduled()
        fired = self._fired()
        with self.log.measure() as cost:
            await super().alarm(alarm_info)
        recent = self.space.maintenance.reports.recent
        report = recent[-1] if recent else None
        self.alarms.append({
            "started_at": started,
            "wall_ms": _now_ms() - started,
            "phase": None if report is None else str(report.phase),
            "settled": None if report is None else report.settled,
            "dispatched": None if report is None else report.dispatched,
            "admitted": waiting - self._scheduled(),
            "fired": sorted(set(self._fired().items()) - set(fired.items())),
            "transactions": self.transactions - transactions,
            "changes_read": getattr(self.storage, "changes_read", 0) - changes_read,
            **cost.as_dict(explain=True),
        })

    def _scheduled(self) -> int:
        return int(self.log.unmetered_exec(_SCHEDULED).scalar())

    def _fired(self) -> dict[str, int]:
        rows = self.log.unmetered_exec(_FIRED)
        return {str(row["id"]): int(row["last_fire"]) for row in rows}

    async def fetch(self, request: Any) -> Response:
        url = urlsplit(str(request.url))
        if not url.path.startswith(PREFIX):
            return await super().fetch(request)
        op = url.path[len(PREFIX) :].split("/", 2)[1]
        args = dict(parse_qsl(url.query))
        handler = getattr(self, f"op_{op.replace('-', '_')}", None)
        if handler is None:
            return Response.json({"error": f"no op {op}"}, status=404)
        try:
            body = await handler(**args)
        except Exception as exc:
            return Response.json({"error": f"{type(exc).__name__}: {exc}"}, status=500)
        return Response(json.dumps(body), headers={"content-type": "application/json"})

    async def op_admit(
        self, thread: str, agent: str, input: str, delay_ms: str = ""
    ) -> dict[str, Any]:
        """Admit one submission (delayed by ``delay_ms`` when given), metered (the admission
        half of scenario 2)."""
        ledger = self.space.runtime.ledger
        due = _now_ms() + int(delay_ms) if delay_ms else None
        with self.log.measure() as cost:
            admitted = ledger.admit(thread, agent, json.loads(input), not_before=due)
        return {"id": admitted.submission.id, "state": str(admitted.submission.state),
                "cost": cost.as_dict(explain=True), "alarms": len(self.alarms)}

    async def op_seed(
        self, n: str, agent: str, input: str, prefix: str, delay_ms: str = ""
    ) -> dict[str, Any]:
        """Admit ``n`` submissions (delayed by ``delay_ms`` when given), one Thread each, in
        one transaction (not metered)."""
        ledger = self.space.runtime.ledger
        value = json.loads(input)
        due = _now_ms() + int(delay_ms) if delay_ms else None

        def admit() -> None:
            for i in range(int(n)):
                ledger.admit(f"{prefix}-{i}", agent, value, not_before=due)

        self.storage.transaction(admit)
        return {"admitted": int(n)}

    async def op_unit_cost(self, what: str, n: str) -> dict[str, Any]:
        """Repeat one piece of a pass ``n`` times inside this request (the driver times the
        round trip: inside workerd the clock stands still while Python runs). See
        ``bench/profile_pass.py``."""
        self.log.unmetered_exec(_SCRATCH)
        if what in ASYNC_UNITS:
            waited = ASYNC_UNITS[what]
            for _ in range(int(n)):
                await waited(self)
            return {"what": what, "n": int(n)}
        unit = UNITS[what]
        for _ in range(int(n)):
            unit(self)
        return {"what": what, "n": int(n)}

    async def op_publication(self) -> dict[str, Any]:
        """Batches delivered to each subscriber by this incarnation (no SQL)."""
        return {"batches": dict(self.space.publication.batches)}

    async def op_stale_alarm(self) -> dict[str, Any]:
        """Set the alarm to now, as an early or stale alarm would fire (not metered)."""
        self.storage.set_alarm(_now_ms())
        return {"alarms": len(self.alarms)}

    async def op_stop(self) -> dict[str, Any]:
        """Delete the alarm (not metered): a scenario-8 object stops firing once measured."""
        self.storage.delete_alarm()
        return {"alarm": await self._alarm_slot(), "alarms": len(self.alarms)}

    async def op_meter(self) -> dict[str, Any]:
        """Everything this incarnation's storage ran so far (its whole meter, requests and
        event streams included), the alarm slot and the alarms run; reads no SQL."""
        reading = self.storage.meter.reading()
        return {"statements": reading.statements, "rows_read": reading.rows_read,
                "rows_written": reading.rows_written, "alarm_writes": reading.alarm_writes,
                "alarm": await self._alarm_slot(), "alarms": len(self.alarms)}

    async def op_alarms(self, since: str = "0") -> dict[str, Any]:
        """The alarms run so far (from index ``since``); reads no SQL."""
        return {"count": len(self.alarms), "alarms": self.alarms[int(since) :]}

    async def op_progress(self, since: str = "0") -> dict[str, Any]:
        """Alarms run so far and the Attempts their passes settled since ``since``; no SQL."""
        mine = self.alarms[int(since) :]
        return {
            "alarms": len(self.alarms),
            "settled": sum(a["settled"] or 0 for a in mine),
            "max_settled": max((a["settled"] or 0 for a in mine), default=0),
        }

    async def _alarm_slot(self) -> int | None:
        # Straight from workerd: the storage adapter's remembered slot stays the pass's own.
        value = await self.ctx.storage.getAlarm()
        return None if value is None or value is jsnull else int(value)

    async def op_status(self, id: str = "") -> dict[str, Any]:
        """Counts for the driver's polls (not metered), and one submission's state."""
        state = None
        if id:
            row = self.log.unmetered_exec(_STATE, id).first()
            state = "scheduled" if row is None else str(row["state"])
        return {
            "state": state,
            "open": int(self.log.unmetered_exec(_OPEN).scalar()),
            "open_timers": int(self.log.unmetered_exec(_OPEN_TIMERS).scalar()),
            "scheduled": self._scheduled(),
            "alarm": await self._alarm_slot(),
            "alarms": len(self.alarms),
            "now": _now_ms(),
        }


class FiresOne(BenchThreadObject):
    """Scenario 8: one schedule declared, its fires submit nothing."""

    app = schedule_app(1, submit=False)


class FiresHundred(BenchThreadObject):
    """Scenario 8: a hundred schedules declared, one falls due; its fires submit nothing."""

    app = schedule_app(100, submit=False)


class FiresOneSubmit(BenchThreadObject):
    """Scenario 8: one schedule declared, each fire submits once."""

    app = schedule_app(1, submit=True)


class FiresHundredSubmit(BenchThreadObject):
    """Scenario 8: a hundred schedules declared, one falls due; each fire submits once."""

    app = schedule_app(100, submit=True)


class Subscribed(BenchThreadObject):
    """Scenario 9: a callable subscriber and a required one."""

    app = subscriber_app()


__all__ = ["BenchThreadObject", "Default", "FiresHundred", "FiresHundredSubmit", "FiresOne",
           "FiresOneSubmit", "Subscribed", "ThreadObject"]
