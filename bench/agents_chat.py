"""Scenario 10 through the Agents SDK: its ``AIChatAgent`` streaming the same answer from the
same fake provider, in the same miniflare (``bench/agents-sdk/chat.js``).

``AIChatAgent`` lives in npm ``@cloudflare/ai-chat`` (the ``agents`` package's own
``agents/ai-chat-agent`` now only throws, pointing there); its ``onChatMessage`` here calls
the AI SDK (npm ``ai``'s ``streamText``) with ``@ai-sdk/openai-compatible`` pointed at the
provider and returns ``toUIMessageStreamResponse()``.

How it is driven, as its own browser client (``useAgentChat``) drives it:

1. ``GET /_chat/{name}/get-messages``: the agent's transcript (a JSON list of UI messages);
2. a WebSocket to ``/_chat/{name}`` (the Worker routes it to the agent of that name with
   ``getAgentByName``); the agent sends ``cf_agent_identity`` and other frames on connect;
3. one text frame ``{"type": "cf_agent_use_chat_request", "id": <request id>, "init":
   {"method": "POST", "body": <JSON text of {"messages": <the transcript + the new user
   message {"id", "role": "user", "parts": [{"type": "text", "text": ...}]}>,
   "trigger": "submit-message"}>}}``;
4. the agent answers with ``{"type": "cf_agent_use_chat_response", "id": <request id>,
   "body": <one UI message stream chunk as JSON text: start, start-step, text-start,
   text-delta {"delta": ...}, ..., text-end, finish-step, finish>, "done": false}`` frames,
   then one with ``"done": true`` once the assistant message is persisted (the SDK holds that
   frame back until then).

Time to the first chunk is from sending the request frame to the first ``text-delta``
frame (the answer's first text; a ``start`` frame comes at once, before the model
answers). Rows are the agent's metered SQL (``/_chat/{name}/meter``, read without SQL; the
same wrapper as scenario 6's agent) from before the request to after the done frame and a
quiet alarm, alarm writes beside them.

One message alone goes to one agent warmed by an unmeasured message (so its first-ever
rows, its tables, are not counted). N at once go to N fresh agents, one conversation each,
since an ``AIChatAgent`` runs one chat turn at a time (its turn queue) and a conversation is
one agent: the natural counterpart of threadline's N Threads, which share one object.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

from bench.model import AGENTS, Measurement, ScenarioError
from bench.provider import ProviderProcess
from bench.ws import WebSocket

#: Bound on one batch of messages.
MESSAGES_S = 120.0
TEXT = "tell me a story"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=MESSAGES_S) as reply:  # noqa: S310 (local URL)
        return json.loads(reply.read())


def _meter(base: str, name: str) -> dict[str, Any]:
    return dict(_get(f"{base}/_chat/{name}/meter"))


def _quiet_meter(base: str, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + MESSAGES_S
    while True:
        reading = _meter(base, name)
        if reading["alarm"] is None:
            return reading
        if time.monotonic() > deadline:
            raise ScenarioError(f"the chat agent {name} kept an alarm: {reading}")
        time.sleep(0.05)


async def _message(base: str, name: str, request_id: str) -> dict[str, float]:
    """One user message to the agent ``name``: seconds to the first text chunk and to done."""
    history = await asyncio.to_thread(_get, f"{base}/_chat/{name}/get-messages")
    socket = await WebSocket.connect(base.replace("http://", "ws://", 1) + f"/_chat/{name}")
    try:
        body = {"messages": [*history, {"id": f"{request_id}-user", "role": "user",
                                        "parts": [{"type": "text", "text": TEXT}]}],
                "trigger": "submit-message"}
        sent = time.perf_counter()
        await socket.send(json.dumps({"type": "cf_agent_use_chat_request", "id": request_id,
                                      "init": {"method": "POST", "body": json.dumps(body)}}))
        first: float | None = None
        text = ""
        while True:
            frame = json.loads(await asyncio.wait_for(socket.recv(), MESSAGES_S))
            if frame.get("type") != "cf_agent_use_chat_response" or frame.get("id") != request_id:
                continue
            if frame.get("error"):
                raise ScenarioError(f"the chat agent failed: {frame.get('body')}")
            if frame.get("done"):
                done = time.perf_counter()
                break
            chunk = json.loads(frame["body"]) if frame.get("body") else {}
            if chunk.get("type") == "text-delta":
                first = first or time.perf_counter()
                text += chunk.get("delta", "")
    finally:
        await socket.close()
    if first is None or not text:
        raise ScenarioError(f"the chat agent {name} streamed no text")
    return {"sent": sent, "first": first, "done": done, "chars": len(text)}


def _cost(before: dict[str, Any], after: dict[str, Any], n: int) -> dict[str, float]:
    was, now = before["meter"], after["meter"]
    return {"rows_read": (now["rowsRead"] - was["rowsRead"]) / n,
            "rows_written": (now["rowsWritten"] - was["rowsWritten"]) / n,
            "statements": (now["statements"] - was["statements"]) / n,
            "set_alarm": (now["setAlarm"] - was["setAlarm"]) / n,
            "delete_alarm": (now["deleteAlarm"] - was["deleteAlarm"]) / n}


def alone(base: str, provider: ProviderProcess, name: str) -> dict[str, float]:
    """One message to a warmed agent: its times and what it cost."""
    asyncio.run(_message(base, name, f"{name}-warm"))
    before = _quiet_meter(base, name)
    provider.stats()
    got = asyncio.run(_message(base, name, f"{name}-measured"))
    after = _quiet_meter(base, name)
    if provider.stats()["requests"] != 1:
        raise ScenarioError("expected one model call for one message")
    return {"settled_s": got["done"] - got["sent"], "p50_ms": (got["first"] - got["sent"]) * 1000,
            "p99_ms": (got["first"] - got["sent"]) * 1000, **_cost(before, after, 1)}


def at_once(base: str, provider: ProviderProcess, names: list[str]) -> dict[str, float]:
    """One message to each of ``names`` (fresh agents) at once: all done and first chunks."""
    for name in names:  # started (their tables made) before the clock runs
        _quiet_meter(base, name)
    provider.stats()

    async def every() -> list[dict[str, float]]:
        return list(await asyncio.gather(*(_message(base, name, f"{name}-m") for name in names)))

    got = asyncio.run(every())
    calls = provider.stats()
    started = min(g["sent"] for g in got)
    waits = sorted((g["first"] - g["sent"]) * 1000 for g in got)
    return {"settled_s": max(g["done"] for g in got) - started,
            "p50_ms": waits[min(len(waits) - 1, len(waits) // 2)],
            "p99_ms": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
            "max_in_flight": calls["max_in_flight"]}


def chat(base: str, provider: ProviderProcess, plan: dict[str, Any], runs: int
         ) -> list[Measurement]:
    """Scenario 10 through ``AIChatAgent``: one message alone, N at once (N agents)."""
    threads, tokens = plan["threads"], plan["tokens"]
    first_ms, total_ms = plan["first_token_ms"], plan["total_ms"]
    provider.configure(tokens, first_ms, (total_ms - first_ms) // max(1, tokens - 1))
    one = Measurement("10", AGENTS, "AIChatAgent: one message alone")
    many = Measurement("10", AGENTS, f"AIChatAgent: {threads} conversations at once"
                                     f" ({threads} agents)")
    for run in range(runs):
        one.runs.append(alone(base, provider, f"chat-alone-{run}"))
        figures = at_once(base, provider, [f"chat-{threads}-{run}-{n}" for n in range(threads)])
        figures["ratio_to_alone"] = figures["settled_s"] / one.runs[-1]["settled_s"]
        many.runs.append(figures)
    return [one, many]
