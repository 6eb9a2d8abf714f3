"""Test-only Worker for the webhook workerd tests; never deployed.

The URL of the receiver (a server the test starts on 127.0.0.1) is only known when the test
runs, so the test writes it into ``webhook_target.py`` in a second overlay before the bundle
is built. ``Default`` is the app's Worker plus ``/_outbound``, which makes one POST through
:class:`threadline.worker.WorkersFetch` from inside workerd and answers what came back, and
``/_queue``, which delivers a batch through :class:`threadline.worker.DeliveryEnv` to a
JavaScript stand-in for a Queue binding.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import js
from pyodide.ffi import create_proxy, to_js
from webhook_target import URL
from workers import Response

import threadline
from threadline.delivery.outbound import OutboundTimeout
from threadline.delivery.subscribers import DeliveryContext
from threadline.threads.records import Record
from threadline.worker import DeliveryEnv, ThreadObjectBase, WorkerBase, WorkersFetch

app = threadline.Application()
app.webhook("receiver", url=URL, secret_env="WEBHOOK_SECRET", batch=2)


@app.agent("chatty")
async def chatty(turn: threadline.Turn) -> dict[str, Any]:
    """Emits ``input["records"]`` records, one journaled step each."""
    count = int(turn.input["records"])
    for n in range(count):
        said = await turn.step(f"say-{n}", lambda n=n: f"record {n}")
        await turn.emit({"n": n, "text": said})
    return {"emitted": count}


@app.agent("reads_env")
async def reads_env(turn: threadline.Turn) -> dict[str, Any]:
    """What ``turn.env`` gives an agent in workerd: the Worker's secret (its length only, so
    the value is never stored), a name not set, and whether a write is refused."""
    try:
        turn.env.WEBHOOK_SECRET = "replaced"
        refused = False
    except TypeError:
        refused = True
    secret = turn.env.WEBHOOK_SECRET
    return {"secret_length": len(secret), "type": type(secret).__name__,
            "unset": turn.env.get("NOT_SET_ANYWHERE", "default"),
            "has_unset": "NOT_SET_ANYWHERE" in turn.env, "write_refused": refused}


@app.agent("recalls")
async def recalls(turn: threadline.Turn) -> list[Any]:
    """Reads the Thread's earlier records of one kind through ``turn.history``."""
    await turn.emit({"text": "remember me"}, kind="note")
    await turn.emit({"text": "not this"}, kind="other")
    return [[r.seq, r.kind, r.body] for r in await turn.history(kinds=["note"], limit=5)]


@app.agent("streams_http")
async def streams_http(turn: threadline.Turn) -> dict[str, Any]:
    """Reads a streamed answer of the receiver through ``turn.http`` in a step: each line and
    the milliseconds since the first one came, so the test sees whether they came apart."""
    base = URL.rsplit("/", 1)[0]

    async def call() -> list[Any]:
        lines: list[Any] = []
        first: float | None = None
        async with turn.http.stream("POST", base + turn.input["path"], json={"stream": True},
                                    headers={"authorization": "Bearer probe"},
                                    timeout=20) as answer:
            await answer.raise_for_status()
            async for line in answer.aiter_lines():
                now = time.time()
                first = now if first is None else first
                if line:
                    lines.append([line, round((now - first) * 1000)])
        return lines

    return {"lines": await turn.step("model", call), "attempt": turn.attempt}


@app.agent("refuses")
async def refuses(turn: threadline.Turn) -> None:
    """Fails its Attempt for good: its log line must reach the Worker's console."""
    raise threadline.NonRetryable("the probe refuses")


#: A queue subscriber driven by ``/_queue`` against a JavaScript stand-in for a Queue binding.
queue_app = threadline.Application()
queued = queue_app.queue("audit", binding="EVENTS")


async def _send_to_a_fake_queue() -> list[Any]:
    """Deliver two records through :class:`DeliveryEnv` to a JS object with ``sendBatch``;
    answer what it was called with, as JavaScript saw it (JSON.stringify)."""
    calls: list[Any] = []

    def send_batch(messages: Any) -> Any:
        calls.append(json.loads(str(js.JSON.stringify(messages))))
        return js.Promise.resolve(None)

    proxy = create_proxy(send_batch)
    try:
        fake = to_js({"sendBatch": proxy}, dict_converter=js.Object.fromEntries)
        env = DeliveryEnv(SimpleNamespace(EVENTS=fake))
        batch = [
            Record(thread_id="t", seq=1, record_id="r1", submission_id=None, kind="note",
                   body={"text": "one", "none": None}, created_at=1),
            Record(thread_id="t", seq=2, record_id="r2", submission_id="s", kind="note",
                   body=[1, 2.5, True], created_at=2),
        ]
        await queued.deliver(batch, DeliveryContext(space="acme", subscriber="audit", env=env,
                                                    http=None, now_ms=0))
        missing = DeliveryEnv(SimpleNamespace()).queue_producer("EVENTS")
        calls.append({"missing": missing is None})
    finally:
        proxy.destroy()
    return calls


class ThreadObject(ThreadObjectBase):
    """The deployed object class with the webhook subscriber."""

    app = app


class Default(WorkerBase):
    """The app's Worker, plus ``/_outbound`` (the outbound port, driven from inside workerd)."""

    app = app

    async def fetch(self, request: Any) -> Response:
        parts = urlsplit(str(request.url))
        if parts.path == "/_queue":
            return Response(json.dumps(await _send_to_a_fake_queue()))
        if parts.path != "/_outbound":
            return await super().fetch(request)
        query = dict(parse_qsl(parts.query))
        try:
            answer = await WorkersFetch().post(
                query["url"], headers={"content-type": "text/plain", "x-probe": "1"},
                body=query.get("body", "").encode(), timeout_ms=int(query["timeout_ms"]))
        except OutboundTimeout as error:
            return Response(json.dumps({"timeout": str(error)}), status=200)
        except Exception as error:
            return Response(json.dumps({"error": type(error).__name__}), status=200)
        return Response(json.dumps({
            "status": answer.status, "headers": dict(answer.headers),
            "body": answer.body.decode("utf-8", "replace"),
        }), status=200)
