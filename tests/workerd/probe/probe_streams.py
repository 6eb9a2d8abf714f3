"""Test-only: objects whose event streams are capped small, or measured by the hundred.

- The API of spaces named ``caps-*`` is served, through the app's own Worker code, by
  ``CappedThreadObject`` (binding ``CAPPED_THREADS``): at most :data:`CAPPED_STREAMS` event
  streams per space and :data:`CAPPED_PER_SUBJECT` per principal, a one-second heartbeat (a
  departed client is noticed within a second).
- The API of spaces named ``mem-*`` is served by ``MeasuredThreadObject`` (binding
  ``MEASURED_THREADS``): caps far above what is measured, the default heartbeat (15 s).
- ``/_streams/{space}/count`` answers, from the object of a ``caps-*`` or ``mem-*`` space, its
  open streams (slots and subscriptions) and the size of its Python heap (Pyodide's wasm memory).
- ``/_streams/idle`` is an endless stream the Worker serves by itself (no object): what one open
  stream costs the Worker alone, to subtract from a measurement through the Worker.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import js
from workers import Response

from entry import Default as AppDefault
from threadline.app import Application
from threadline.config import RuntimeConfig
from threadline.worker import ThreadObjectBase

CAPPED_STREAMS = 3
#: One principal's share of a ``caps-*`` space (the API token is not capped per principal).
CAPPED_PER_SUBJECT = 2
CAPPED_API = "/v1/spaces/caps-"
MEASURED_API = "/v1/spaces/mem-"
PREFIX = "/_streams/"
IDLE = "/_streams/idle"

capped_app = Application(RuntimeConfig(
    max_event_streams=CAPPED_STREAMS, max_event_streams_per_subject=CAPPED_PER_SUBJECT,
    sse_heartbeat_ms=1_000,
))


measured_app = Application(RuntimeConfig(
    max_event_streams=10_000, max_event_streams_per_subject=10_000,
))


@capped_app.agent("echo")
@measured_app.agent("echo")
async def echo(turn: Any) -> Any:
    """Returns its input: a Thread with a record to stream."""
    return turn.input


class CappedApiWorker(AppDefault):
    """The app's Worker, forwarding to ``CappedThreadObject``."""

    binding = "CAPPED_THREADS"


class MeasuredApiWorker(AppDefault):
    """The app's Worker, forwarding to ``MeasuredThreadObject``."""

    binding = "MEASURED_THREADS"


def _wasm_bytes() -> int | None:
    try:
        import pyodide_js  # type: ignore[import-not-found]

        return int(pyodide_js._module.HEAP8.length)
    except Exception:
        return None


class _Counted(ThreadObjectBase):
    async def fetch(self, request: Any) -> Response:
        if urlsplit(str(request.url)).path.startswith(PREFIX):
            api = self.space.api
            return Response(json.dumps({
                "streams": len(api.streams), "subscribers": len(api.subscribers),
                "wasm_bytes": _wasm_bytes(),
            }), headers={"content-type": "application/json"})
        return await super().fetch(request)


class CappedThreadObject(_Counted):
    """The deployed object class with small event-stream caps."""

    app = capped_app


class MeasuredThreadObject(_Counted):
    """The deployed object class with caps above any measurement."""

    app = measured_app


#: The writers of the Worker's idle streams: kept so that they are never collected (closed).
_IDLE_WRITERS: list[Any] = []


async def answer(worker: Any, request: Any) -> Response | None:
    """The answer to a request of this module's routes, or None for any other path."""
    url = str(request.url)
    path = urlsplit(url).path
    if path.startswith(CAPPED_API):
        return await CappedApiWorker(worker.ctx, worker.env).fetch(request)
    if path.startswith(MEASURED_API):
        return await MeasuredApiWorker(worker.ctx, worker.env).fetch(request)
    if path == IDLE:
        pipe = js.TransformStream.new()
        writer = pipe.writable.getWriter()
        writer.write(js.TextEncoder.new().encode(": open\n\n"))
        _IDLE_WRITERS.append(writer)
        return Response(pipe.readable, headers={"content-type": "text/event-stream"})
    if path.startswith(PREFIX):
        space = path[len(PREFIX):].split("/", 1)[0]
        binding = worker.env.CAPPED_THREADS if space.startswith("caps-") else (
            worker.env.MEASURED_THREADS)
        counted = await binding.getByName(space).fetch(url)
        return Response(await counted.bytes(), status=counted.status,
                        headers={"content-type": "application/json"})
    return None


__all__ = ["CappedThreadObject", "MeasuredThreadObject", "answer"]
