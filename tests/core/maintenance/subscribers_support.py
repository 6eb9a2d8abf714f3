"""Helpers for the subscriber tests: an agent that emits what its input lists, a recorder of
delivered batches, and readers of the subscriber rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from threadline import Application, Record, Turn
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.maintenance.required_gate import Hold, read_holds
from threadline.maintenance.subscriber_cursors import SubscriberRow, read_rows
from threadline.testing import SimulatedObject

START = 1_700_000_000_000
CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)


def clock() -> ManualClock:
    return ManualClock(START)


def writer_app(config: RuntimeConfig = CONFIG) -> Application:
    """An app whose agent ``writer`` emits one record per item of ``input["emit"]`` (a list
    of ``[kind, body]``) and returns how many it emitted."""
    app = Application(config)

    @app.agent("writer")
    async def writer(turn: Turn) -> dict[str, Any]:
        items = turn.input["emit"] if isinstance(turn.input, dict) else []
        for kind, body in items:
            await turn.emit(body, kind=kind)
        return {"emitted": len(items)}

    return app


class Recorder:
    """Collects what a subscriber was given, batch by batch; ``fail`` decides a raise."""

    def __init__(self) -> None:
        self.batches: list[list[Record]] = []
        self.fail: Callable[[list[Record]], BaseException | None] = lambda batch: None

    async def __call__(self, batch: list[Record]) -> None:
        error = self.fail(batch)
        if error is not None:
            raise error
        self.batches.append(list(batch))

    @property
    def records(self) -> list[Record]:
        return [record for batch in self.batches for record in batch]

    def per_thread(self) -> dict[str, list[int]]:
        """Each Thread's seqs, in the order they were delivered."""
        out: dict[str, list[int]] = {}
        for record in self.records:
            out.setdefault(record.thread_id, []).append(record.seq)
        return out


def emit(obj: SimulatedObject, thread: str, *items: tuple[str, Any]) -> str:
    """Admit one ``writer`` submission emitting ``items``; its id."""
    return obj.admit(thread, "writer", {"emit": [list(item) for item in items]}).id


def log_end(obj: SimulatedObject, *kinds: str) -> int:
    """Where the object's log ends (the ``pos`` of its last record, 0 when empty), or, given
    ``kinds``, the ``pos`` of its last record of those kinds: where the cursor of a subscriber
    to them stands once it consumed them (records it does not want, past its last batch, are
    stepped over in memory only)."""
    if not kinds:
        found = obj.storage.exec("SELECT COALESCE(MAX(pos), 0) AS pos FROM tl_history").one()
    else:
        marks = ", ".join("?" for _ in kinds)
        found = obj.storage.exec(
            f"SELECT COALESCE(MAX(pos), 0) AS pos FROM tl_history WHERE kind IN ({marks})",
            *kinds).one()
    return int(found["pos"])


def row(obj: SimulatedObject, name: str) -> SubscriberRow | None:
    """The subscriber's row as committed."""
    return read_rows(obj.storage).get(name)


def holds(obj: SimulatedObject, name: str) -> dict[str, Hold]:
    """The Threads the subscriber is held on, as committed."""
    return read_holds(obj.storage).get(name, {})


async def maintenance_view(obj: SimulatedObject) -> dict[str, Any]:
    """``GET /v1/spaces/{space}/maintenance`` as the object answers it."""
    from threadline.api.http import Request

    response = await obj.space.handle(
        Request.from_url("GET", f"http://object/v1/spaces/{obj.name}/maintenance"))
    assert response.status == 200, response.body
    body: dict[str, Any] = response.json()
    return body
