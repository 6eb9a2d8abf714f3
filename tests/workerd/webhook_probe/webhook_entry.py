"""Test-only Worker for the webhook workerd tests; never deployed.

The URL of the receiver (a server the test starts on 127.0.0.1) is only known when the test
runs, so the test writes it into ``webhook_target.py`` in a second overlay before the bundle
is built. ``Default`` is the app's Worker plus ``/_outbound``, which makes one POST through
:class:`threadline.worker.WorkersFetch` from inside workerd and answers what came back.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from webhook_target import URL
from workers import Response

import threadline
from threadline.outbound import OutboundTimeout
from threadline.worker import ThreadObjectBase, WorkerBase, WorkersFetch

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


class ThreadObject(ThreadObjectBase):
    """The deployed object class with the webhook subscriber."""

    app = app


class Default(WorkerBase):
    """The app's Worker, plus ``/_outbound`` (the outbound port, driven from inside workerd)."""

    app = app

    async def fetch(self, request: Any) -> Response:
        parts = urlsplit(str(request.url))
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
