"""``python -m bench.retention``: what a chat Thread holds after a year, with and without retention.

One simulated object (``threadline.testing.SimulatedObject``, SQLite, a manual clock) runs a chat
Thread of ``--per-day`` turns a day for ``--days`` days, each turn a journaled step, one emitted
record of about 1 KB and its settlement, the alarm firing as the platform would. Once without
retention, once with ``retention_ms`` of ``--retention-days``. Printed for each: the rows of the
tables retention covers (log, submissions, journal, waits, messages, abort intents, Threads)
and the bytes of the database in use (pages minus free pages: SQLite reuses freed pages rather
than shrink the file). Then the cost of one retention wave (statements, rows read and written
as the CPython storage counts them, wall time): a steady wave of the retained object (what
expired since the last one), and the first wave after retention is turned on for the object
that kept everything (bounded by ``WAVE_RECORDS``).

Usage: python -m bench.retention [--days 365] [--per-day 100] [--retention-days 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.scheduling import RETENTION
from threadline.testing import SimulatedObject

START = 1_700_000_000_000
DAY_MS = 86_400_000
#: The tables retention covers, each with its row count.
COUNTS = {
    "tl_history": "SELECT COUNT(*) AS n FROM tl_history",
    "tl_submissions": "SELECT COUNT(*) AS n FROM tl_submissions",
    "tl_journal": "SELECT COUNT(*) AS n FROM tl_journal",
    "tl_waits": "SELECT COUNT(*) AS n FROM tl_waits",
    "tl_messages": "SELECT COUNT(*) AS n FROM tl_messages",
    "tl_abort_intents": "SELECT COUNT(*) AS n FROM tl_abort_intents",
    "tl_threads": "SELECT COUNT(*) AS n FROM tl_threads",
}
TABLES = tuple(COUNTS)


def chat_app(retention_days: int | None) -> Application:
    retention = None if retention_days is None else retention_days * DAY_MS
    app = Application(RuntimeConfig(retention_ms=retention))
    text = "r" * 1_000

    @app.agent("chat")
    async def chat(turn: Turn) -> Any:
        reply = await turn.step("reply", lambda: {"text": text})
        await turn.emit({"role": "assistant", "text": reply["text"]})
        return {"ok": True}

    return app


def footprint(obj: SimulatedObject) -> dict[str, int]:
    rows = {table: int(obj.storage.exec(sql).one()["n"]) for table, sql in COUNTS.items()}
    pages = int(obj.storage.exec("PRAGMA page_count").rows[0]["page_count"])
    free = int(obj.storage.exec("PRAGMA freelist_count").rows[0]["freelist_count"])
    size = int(obj.storage.exec("PRAGMA page_size").rows[0]["page_size"])
    return {"rows": sum(rows.values()), "bytes": (pages - free) * size, **rows}


async def a_year(obj: SimulatedObject, days: int, per_day: int) -> float:
    started = time.perf_counter()
    step = DAY_MS // per_day
    for _ in range(days):
        for _ in range(per_day):
            obj.admit("chat", "chat", {"text": "hi"})
            await obj.run_alarms(until=obj.clock.now_ms())
            obj.clock.advance(step)
    await obj.run_alarms(until=obj.clock.now_ms())
    return time.perf_counter() - started


async def one_wave(obj: SimulatedObject) -> dict[str, Any]:
    """The next retention wave, run at its due time, and what it cost."""
    lane = obj.space.scheduler.due_queue.get(RETENTION)
    assert lane is not None and lane.due_at is not None
    obj.clock.set(max(obj.clock.now_ms(), lane.due_at))
    before, rows_before = obj.storage.meter.reading(), footprint(obj)["rows"]
    started = time.perf_counter()
    now = obj.clock.now_ms()
    await obj.space.retention.run_lane(now, now + 30_000)
    elapsed = time.perf_counter() - started
    cost = obj.storage.meter.reading() - before
    tally = obj.space.retention.last_wave
    return {
        "records_deleted": tally.records, "submissions_deleted": tally.submissions,
        "rows_deleted": rows_before - footprint(obj)["rows"], "statements": cost.statements,
        "rows_read": cost.rows_read, "rows_written": cost.rows_written,
        "ms": round(elapsed * 1000, 1),
    }


async def measure(days: int, per_day: int, retention_days: int) -> dict[str, Any]:
    out: dict[str, Any] = {"days": days, "per_day": per_day, "retention_days": retention_days}
    async with SimulatedObject(chat_app(None), clock=ManualClock(START)) as kept:
        out["simulated_s_without"] = round(await a_year(kept, days, per_day), 1)
        out["without"] = footprint(kept)
        # Retention turned on for the object that kept everything: its first wave.
        await kept.redeploy(chat_app(retention_days))
        out["first_wave_after_turning_on"] = await one_wave(kept)
    async with SimulatedObject(chat_app(retention_days), clock=ManualClock(START)) as pruned:
        out["simulated_s_with"] = round(await a_year(pruned, days, per_day), 1)
        out["with"] = footprint(pruned)
        pruned.clock.advance(3_600_000)
        for _ in range(per_day // 24 + 1):
            pruned.admit("chat", "chat", {"text": "hi"})
            await pruned.run_alarms(until=pruned.clock.now_ms())
        out["steady_wave"] = await one_wave(pruned)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--per-day", type=int, default=100)
    parser.add_argument("--retention-days", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(measure(args.days, args.per_day, args.retention_days))
    for name in ("without", "with"):
        figures = result[name]
        print(f"{name:>8} retention: {figures['rows']:>7} rows, {figures['bytes'] / 1e6:6.1f} MB"
              f" ({', '.join(f'{t[3:]} {figures[t]}' for t in TABLES)})")
    for name in ("steady_wave", "first_wave_after_turning_on"):
        wave = result[name]
        print(f"{name}: {wave['records_deleted']} records and {wave['submissions_deleted']}"
              f" submissions deleted ({wave['rows_deleted']} rows), {wave['statements']}"
              f" statements, {wave['rows_read']} rows read, {wave['rows_written']} rows"
              f" written, {wave['ms']} ms")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
