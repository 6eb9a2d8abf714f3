"""What retention saves, and what one wave costs, printed (run with ``-s``).

A chat Thread of 10 turns a day for 90 days, with a 30-day retention and without: the rows it
holds stop growing at about 30 days' worth, and a steady wave reads a few rows per row it
deletes. ``python -m bench.retention`` runs the full year of 100 turns a day.
"""

from __future__ import annotations

import asyncio
import time

from retention_support import START, chat_app, chat_days, config, count, footprint

from threadline import ManualClock
from threadline.scheduling import RETENTION
from threadline.testing import SimulatedObject

DAYS = 90
PER_DAY = 10
#: Rows of one turn: its submission, its journaled step, its emitted record and its settlement.
ROWS_PER_TURN = 4


async def _held(retention_days: int | None) -> tuple[int, int, dict[str, int]]:
    async with SimulatedObject(chat_app(config(retention_days)), clock=ManualClock(START),
                               check_alarm_invariant=True) as obj:
        await chat_days(obj, "t", days=DAYS, per_day=PER_DAY)
        rows, size = footprint(obj)
        wave: dict[str, int] = {}
        if retention_days is not None:
            lane = obj.space.scheduler.due_queue.get(RETENTION)
            assert lane is not None and lane.due_at is not None
            obj.clock.set(max(obj.clock.now_ms(), lane.due_at))
            before, held = obj.storage.meter.reading(), count(obj, "tl_history")
            started = time.perf_counter()
            now = obj.clock.now_ms()
            await obj.space.retention.run_lane(now, now + 30_000)
            cost = obj.storage.meter.reading() - before
            wave = {"deleted": held - count(obj, "tl_history"), "statements": cost.statements,
                    "read": cost.rows_read, "written": cost.rows_written,
                    "us": int((time.perf_counter() - started) * 1e6)}
        return rows, size, wave


def test_retention_holds_a_chat_thread_at_its_retained_days_and_a_wave_costs_what_it_deletes(
) -> None:
    rows_all, bytes_all, _ = asyncio.run(_held(None))
    rows_kept, bytes_kept, wave = asyncio.run(_held(30))
    print(f"\nchat Thread, {PER_DAY} turns a day for {DAYS} days: {rows_all} rows,"
          f" {bytes_all / 1e6:.2f} MB without retention; {rows_kept} rows,"
          f" {bytes_kept / 1e6:.2f} MB with 30 days")
    print(f"one steady retention wave: {wave['deleted']} records deleted, {wave['statements']}"
          f" statements, {wave['read']} rows read, {wave['written']} rows written,"
          f" {wave['us']} us")
    assert rows_all == DAYS * PER_DAY * ROWS_PER_TURN + 1
    # 30 days of turns, and the hour a wave may lag behind them.
    assert rows_kept <= (30 * PER_DAY + PER_DAY) * ROWS_PER_TURN + 1
    assert bytes_kept < bytes_all / 2
    # A steady wave deletes what expired since the last one, reading a few rows per record.
    assert 0 < wave["deleted"] <= 2 * PER_DAY
    assert wave["read"] <= 6 * wave["deleted"] + 20
