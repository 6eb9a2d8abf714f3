"""The example Worker: one application, its Durable Object class and its entrypoint.

A user's own Worker looks like this: build an ``Application``, register agents, then declare
the two classes that ``wrangler.toml`` names. The agents here exist so that the API works on a
fresh clone; replace them with your own. ``chat`` talks to an OpenAI-compatible provider named
by the Worker's environment (``MODEL_URL``, ``MODEL_API_KEY``, ``MODEL``).
"""

import json
from typing import Any

import threadline
from threadline.worker import ThreadObjectBase, WorkerBase

app = threadline.Application()


def _text(value: Any) -> str:
    """The ``text`` of an input shaped ``{"text": str}``; anything else cannot succeed."""
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    raise threadline.NonRetryable('input must be {"text": <string>}')


@app.agent("echo")
async def echo(turn: threadline.Turn) -> dict[str, Any]:
    """Say the input's text back: one journaled step, one history record."""
    text = _text(turn.input)
    said = await turn.step("echo", lambda: text)
    await turn.emit({"role": "assistant", "text": said})
    return {"text": said}


@app.agent("confirm")
async def confirm(turn: threadline.Turn) -> dict[str, Any]:
    """Ask for an approval of the input's text; say it only once approved."""
    text = _text(turn.input)
    if not await turn.approval("confirm", {"text": text}):
        return {"approved": False}
    await turn.emit({"role": "assistant", "text": text})
    return {"approved": True}


@app.agent("chat")
async def chat(turn: threadline.Turn) -> dict[str, Any]:
    """One chat turn: the Thread's earlier messages as context, the model's answer streamed to
    the Thread's readers as it comes and kept as one ``message`` record."""
    text = _text(turn.input)
    earlier = await turn.history(kinds=["message"], limit=40)
    messages = [{"role": r.body["role"], "content": r.body["text"]} for r in earlier
                if isinstance(r.body, dict) and r.body.get("role") in ("user", "assistant")]
    await turn.emit({"role": "user", "text": text}, kind="message")
    messages.append({"role": "user", "content": text})

    async def answer() -> str:
        async with turn.stream(kind="message", meta={"role": "assistant"}) as reply, \
                turn.http.stream(
                    "POST", turn.env.MODEL_URL.rstrip("/") + "/chat/completions",
                    headers={"authorization": f"Bearer {turn.env.get('MODEL_API_KEY', '')}"},
                    json={"model": turn.env.get("MODEL", "gpt-4o-mini"), "stream": True,
                          "messages": messages},
                ) as model:
            await model.raise_for_status()  # a 429 with Retry-After waits, then runs again
            async for line in model.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    delta = choices[0].get("delta", {}).get("content")
                    if delta:
                        await reply.write(delta)
        return reply.text

    return {"text": await turn.step("model", answer)}


class ThreadObject(ThreadObjectBase):
    """Hosts the Threads of one space (the Durable Object class in wrangler.toml)."""

    app = app


class Default(WorkerBase):
    """The Worker's HTTP entrypoint."""

    app = app
