"""An HTTP-level test driver: a Space on SqliteStorage with ManualClock, called like a client.

No alarm fires here: a test that needs a submission to progress drives the runtime the way a
pass does (recovery, then one head Attempt, per Thread, until nothing changes), so it decides
when work moves. The alarm's own path is tested over ``threadline.testing`` and in workerd.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from threadline import Application, ManualClock, SequentialIds, Space, SqliteStorage
from threadline.api.http import Request, Response
from threadline.scheduling import Failpoints

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "src" / "entry.py"
_UNSET: Any = object()

_loaded = 0


def load_example_app() -> Application:
    """A fresh ``app`` from ``src/entry.py`` as shipped, its platform shells stubbed out.

    ``threadline.worker`` imports the Cloudflare SDK, which CPython cannot load; the agents do
    not use it, so a stand-in with the two base classes is enough to run them here.
    """
    global _loaded
    _loaded += 1
    shells = types.ModuleType("threadline.worker")
    shells.ThreadObjectBase = type("ThreadObjectBase", (), {})  # type: ignore[attr-defined]
    shells.WorkerBase = type("WorkerBase", (), {})  # type: ignore[attr-defined]
    previous = sys.modules.get("threadline.worker")
    sys.modules["threadline.worker"] = shells
    try:
        spec = importlib.util.spec_from_file_location(f"example_entry_{_loaded}", ENTRY)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if previous is None:
            sys.modules.pop("threadline.worker", None)
        else:
            sys.modules["threadline.worker"] = previous
    app = module.app
    assert isinstance(app, Application)
    return app


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Api:
    """One object's HTTP surface over an in-memory database."""

    def __init__(self, app: Application, clock: ManualClock, space_id: str = "acme") -> None:
        self.app = app
        self.clock = clock
        self.space_id = space_id
        self.storage = SqliteStorage(":memory:")
        self.incarnation = 0
        self.build()

    def build(self) -> None:
        """A new incarnation of the object over the same storage (eviction)."""
        self.incarnation += 1
        self.failpoints = Failpoints()
        self.space = Space(
            self.app, self.storage, clock=self.clock, rng=random.Random(self.incarnation),
            ids=SequentialIds() if self.incarnation == 1 else _Prefixed(self.incarnation),
            failpoints=self.failpoints,
        )
        run(self.space.start())

    # -- requests ------------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        json_body: Any = _UNSET,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        raw = body if body is not None else (
            b"" if json_body is _UNSET else json.dumps(json_body).encode()
        )
        request = Request.from_url(method, path, headers or {}, raw)
        return run(self.space.handle(request))

    def thread_path(self, thread: str) -> str:
        return f"/v1/spaces/{self.space_id}/threads/{thread}"

    def submit(self, thread: str, input: Any, **fields: Any) -> Response:
        return self.call("POST", self.thread_path(thread) + "/submissions",
                         {"input": input, **fields})

    def submission_path(self, thread: str, submission_id: str) -> str:
        return f"{self.thread_path(thread)}/submissions/{submission_id}"

    # -- driving the runtime -------------------------------------------------------------

    def drive(self, rounds: int = 50) -> None:
        """Run recovery and head Attempts of every Thread until nothing changes."""
        runtime = self.space.runtime

        async def go() -> None:
            for _ in range(rounds):
                before = runtime.ledger.scan_nonterminal()
                for thread in sorted({item.thread_id for item in before}):
                    runtime.run_recovery(thread)
                    await runtime.process_thread_head(thread)
                if runtime.ledger.scan_nonterminal() == before:
                    return
            raise AssertionError("the runtime did not quiesce")

        run(go())

    # -- the database --------------------------------------------------------------------

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every ``tl_`` table (the alarm slot included), in a stable order."""
        names = [
            row["name"] for row in self.storage.exec(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tl_%'"
                " ORDER BY name"
            )
        ]
        return {
            name: sorted(
                (tuple(row.values()) for row in self.storage.exec(f"SELECT * FROM {name}")),
                key=repr,
            )
            for name in names
        }


class _Prefixed:
    """Ids of a later incarnation, distinct from the first one's sequence."""

    def __init__(self, incarnation: int) -> None:
        self.inner = SequentialIds()
        self.incarnation = incarnation

    def new_id(self, prefix: str) -> str:
        return self.inner.new_id(f"{prefix}{self.incarnation}")


def make_api(clock: ManualClock, extend: Callable[[Application], None] | None = None) -> Api:
    """An Api over the example app, optionally with extra agents registered."""
    app = load_example_app()
    if extend is not None:
        extend(app)
    return Api(app, clock)
