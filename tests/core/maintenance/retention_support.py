"""Helpers for the retention tests: a chat agent (one journaled step, one emitted record, a
settlement per turn), a clock driven day by day, and readers of what storage holds."""

from __future__ import annotations

from typing import Any

from threadline import Application, Turn
from threadline.config import RuntimeConfig
from threadline.testing import SimulatedObject

START = 1_700_000_000_000
DAY_MS = 86_400_000
#: The tables retention deletes from, and the one it never touches.
TABLES = ("tl_history", "tl_submissions", "tl_journal", "tl_waits", "tl_messages",
          "tl_abort_intents", "tl_threads")


def config(retention_days: int | None = None, **extra: Any) -> RuntimeConfig:
    retention = None if retention_days is None else retention_days * DAY_MS
    return RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000,
                         retention_ms=retention, **extra)


def chat_app(cfg: RuntimeConfig, *, text_bytes: int = 1_000) -> Application:
    """``chat`` replies to its input: a journaled step and one emitted record per turn;
    ``approve`` asks for an approval first; ``mailer`` sends a message to ``input["to"]``."""
    app = Application(cfg)
    reply_text = "r" * text_bytes

    @app.agent("chat")
    async def chat(turn: Turn) -> Any:
        reply = await turn.step("reply", lambda: {"text": reply_text})
        await turn.emit({"role": "assistant", "text": reply["text"]})
        return {"ok": True}

    @app.agent("approve")
    async def approve(turn: Turn) -> Any:
        await turn.emit({"asked": True})
        decision = await turn.approval("go")
        return {"approved": decision.approved}

    @app.agent("mailer")
    async def mailer(turn: Turn) -> Any:
        await turn.send("elsewhere", str(turn.input["to"]), {"hello": True})
        return {"sent": True}

    return app


async def chat_days(obj: SimulatedObject, thread: str, days: int, per_day: int,
                    agent: str = "chat") -> None:
    """``per_day`` turns on ``thread`` each day for ``days`` days, each settled that day, the
    object's alarms fired as they come."""
    step = DAY_MS // per_day
    for _ in range(days):
        for _ in range(per_day):
            obj.admit(thread, agent, {"text": "hi"})
            await obj.run_alarms(until=obj.clock.now_ms())
            obj.clock.advance(step)
        await obj.run_alarms(until=obj.clock.now_ms())


def count(obj: SimulatedObject, table: str, where: str = "1 = 1", *params: Any) -> int:
    return int(obj.storage.exec(f"SELECT COUNT(*) AS n FROM {table} WHERE {where}",
                                *params).one()["n"])


def seqs(obj: SimulatedObject, thread: str) -> list[int]:
    return [int(row["seq"]) for row in obj.storage.exec(
        "SELECT seq FROM tl_history WHERE thread_id = ? ORDER BY seq", thread)]


def footprint(obj: SimulatedObject) -> tuple[int, int]:
    """Rows in the tables retention covers, and the bytes of the database (pages in use)."""
    rows = sum(count(obj, table) for table in TABLES)
    pages = int(obj.storage.exec("PRAGMA page_count").rows[0]["page_count"])
    free = int(obj.storage.exec("PRAGMA freelist_count").rows[0]["freelist_count"])
    size = int(obj.storage.exec("PRAGMA page_size").rows[0]["page_size"])
    return rows, (pages - free) * size
