"""Scenario 10 in workerd: LLM turns over the HTTP API, many Threads of one space at once.

The example Worker's ``chat`` agent (``src/entry.py``, unchanged; the bench object registers
it) streams the fake provider's answer (``bench.provider``, its own process on 127.0.0.1,
``MODEL_URL`` of the runtime) through ``turn.http`` and ``turn.stream``. Per run, in a fresh
space warmed by one unmeasured turn:

- **one turn alone**: one Thread's event stream is opened, then one ``chat`` submission
  POSTed; the time from sending the POST to the turn's ``submission.settled`` record on that
  stream, and to the stream's first delta (a ``stream`` event with text);
- **N Threads at once**: N Threads' event streams are opened, then N submissions POSTed at
  once (one each, concurrently); all settled = from the first POST sent to the last
  ``submission.settled`` record seen; admission -> first delta = each turn's POST sent to
  its Thread's first delta, p50 and p99 over the N turns;
- **one emit per token** (``bench_app.chat_per_token``): the same N at once, each token
  appended to the log with ``turn.emit`` instead of streamed.

Rows are the object's whole storage meter (``/_bench/{space}/meter``: admissions, passes and
the event streams' reads alike) from the quiet object before the POSTs to the quiet object
after, divided by the turns. The driver's polls read no SQL; ``model calls at once`` is the
most answers the provider was streaming at the same time.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from bench.live import Bench, poll
from bench.model import WORKERD, Measurement, ScenarioError
from bench.provider import ProviderProcess

#: Bound on one batch of turns (50 turns of 2 s take under 15 s when healthy).
TURNS_S = 120.0
SETTLED = "submission.settled"


def percentile(samples: list[float], fraction: float) -> float:
    """The sample at ``fraction`` of the sorted samples (nearest rank, as scenario 4)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _first_delta(event: str, data: dict[str, Any], agent: str) -> bool:
    """Whether an event carries the first of the answer's text to a reader."""
    if agent == "chat":
        return event == "stream" and data.get("state") == "open" and bool(data.get("text"))
    return event == "record" and data.get("kind") == "token"


async def _turns(url: str, token: str, space: str, threads: list[str], agent: str
                 ) -> dict[str, Any]:
    """One turn on each of ``threads`` at once: open their event streams, POST one
    submission each, read until each settled. Times on the driver's monotonic clock."""
    first: dict[str, float] = {}
    settled: dict[str, float] = {}
    sent: dict[str, float] = {}
    limits = httpx.Limits(max_connections=2 * len(threads) + 4,
                          max_keepalive_connections=2 * len(threads) + 4)
    async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {token}"},
                                 timeout=httpx.Timeout(TURNS_S), limits=limits) as client:
        opened = {thread: asyncio.Event() for thread in threads}

        async def read(thread: str) -> None:
            path = f"/v1/spaces/{space}/threads/{thread}/events"
            async with aconnect_sse(client, "GET", path) as source:
                if source.response.status_code != 200:
                    raise ScenarioError(f"events of {thread}: HTTP {source.response.status_code}")
                opened[thread].set()
                async for sse in source.aiter_sse():
                    now = time.perf_counter()
                    data = json.loads(sse.data) if sse.data else {}
                    if thread not in first and _first_delta(sse.event, data, agent):
                        first[thread] = now
                    if sse.event == "record" and data.get("kind") == SETTLED:
                        settled[thread] = now
                        return
            raise ScenarioError(f"the event stream of {thread} ended before it settled")

        readers = [asyncio.ensure_future(read(thread)) for thread in threads]
        try:
            await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened.values())), 60)

            async def post(thread: str) -> None:
                sent[thread] = time.perf_counter()
                reply = await client.post(
                    f"/v1/spaces/{space}/threads/{thread}/submissions",
                    json={"agent": agent, "input": {"text": "tell me a story"}})
                if reply.status_code != 202:
                    raise ScenarioError(f"submission refused: HTTP {reply.status_code}: "
                                        f"{reply.text[:300]}")

            await asyncio.gather(*(post(thread) for thread in threads))
            await asyncio.wait_for(asyncio.gather(*readers), TURNS_S)
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
    started = min(sent.values())
    waits = sorted((first[t] - sent[t]) * 1000 for t in threads if t in first)
    return {"settled_ms": (max(settled.values()) - started) * 1000, "first_delta_ms": waits,
            "missing_deltas": len(threads) - len(waits)}


def _quiet_meter(obj: Bench) -> dict[str, Any]:
    """The object's meter once no alarm is set (read without SQL)."""
    return dict(poll(lambda: (m := obj.call("meter"))["alarm"] is None and m, "a quiet object",
                     timeout=TURNS_S))


def _measured(runtime: Any, obj: Bench, provider: ProviderProcess, threads: list[str],
              agent: str) -> dict[str, float]:
    from workerd_runtime import TOKEN

    before = _quiet_meter(obj)
    provider.stats()
    got = asyncio.run(_turns(runtime.url, TOKEN, obj.name, threads, agent))
    calls = provider.stats()
    after = _quiet_meter(obj)
    n = len(threads)
    if calls["requests"] != n:
        raise ScenarioError(f"expected {n} model calls, the provider saw {calls['requests']}")
    figures: dict[str, float] = {
        "settled_s": got["settled_ms"] / 1000,
        "rows_read": (after["rows_read"] - before["rows_read"]) / n,
        "rows_written": (after["rows_written"] - before["rows_written"]) / n,
        "alarm_writes": (after["alarm_writes"] - before["alarm_writes"]) / n,
        "statements": (after["statements"] - before["statements"]) / n,
        "alarms": after["alarms"] - before["alarms"],
        "max_in_flight": calls["max_in_flight"],
    }
    if agent == "chat":
        # Emitted inside the step, the per-token records reach readers only as the step
        # commits: their "first delta" would be the turn's end, so only streams report one.
        if got["missing_deltas"]:
            raise ScenarioError(f"{got['missing_deltas']} turns showed no delta on their stream")
        figures["p50_ms"] = percentile(got["first_delta_ms"], 0.5)
        figures["p99_ms"] = percentile(got["first_delta_ms"], 0.99)
    return figures


def turns(runtime: Any, provider: ProviderProcess, plan: dict[str, Any], runs: int
          ) -> list[Measurement]:
    """Scenario 10 in workerd: one turn alone, N at once, N at once emitting per token."""
    threads, tokens = plan["threads"], plan["tokens"]
    first_ms, total_ms = plan["first_token_ms"], plan["total_ms"]
    provider.configure(tokens, first_ms, (total_ms - first_ms) // max(1, tokens - 1))
    alone = Measurement("10", WORKERD, "one turn alone (turn.stream)")
    many = Measurement("10", WORKERD, f"{threads} Threads at once (turn.stream)")
    emitting = Measurement("10", WORKERD, f"{threads} Threads at once (one emit per token)")
    names = [f"user-{n}" for n in range(threads)]
    for run in range(runs):
        obj = Bench(runtime, f"llm-{threads}-{run}")
        _measured(runtime, obj, provider, ["warm-up"], "chat")
        alone.runs.append(_measured(runtime, obj, provider, ["alone"], "chat"))
        figures = _measured(runtime, obj, provider, names, "chat")
        figures["ratio_to_alone"] = figures["settled_s"] / alone.runs[-1]["settled_s"]
        many.runs.append(figures)
        obj = Bench(runtime, f"llm-emit-{threads}-{run}")
        _measured(runtime, obj, provider, ["warm-up"], "chat-per-token")
        emitting.runs.append(_measured(runtime, obj, provider, names, "chat-per-token"))
    return [alone, many, emitting]
