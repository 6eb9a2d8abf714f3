"""A Pydantic AI model's streamed answer reaches the Thread's event streams as it is written,
and the log keeps one record of it.

The model is Pydantic AI's ``FunctionModel`` streaming the pieces the test hands it: a reader
sees them before the turn settles, nothing is stored per delta, and the answer closes into
one ``message`` record (``role: assistant``) beside the user's. A try of the model request
that fails mid-stream abandons its stream, and the retried request streams under a new id.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from api_support import Api, make_api, run
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sse_support import StreamReader, open_stream, submit

from threadline import Application, ManualClock, RetryPolicy, Turn
from threadline.pydantic_ai import ThreadlineDurability, run_durably
from threadline.threads.history import read_history


class Pen:
    """Hands the model its pieces one at a time, when the test says."""

    def __init__(self) -> None:
        self.parts: asyncio.Queue[str | None] = asyncio.Queue()
        self.tries = 0

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.tries += 1
        while (part := await self.parts.get()) is not None:
            if part == "!fail":
                raise ConnectionError("the provider dropped the stream")
            yield part

    def extend(self, app: Application) -> None:
        agent = Agent(FunctionModel(stream_function=self.stream), name="writer",
                      capabilities=[ThreadlineDurability(model_retry=RetryPolicy(max_attempts=2))])

        @app.agent("writer")
        async def writer(turn: Turn) -> dict[str, Any]:
            result = await run_durably(turn, agent, turn.input["text"])
            return {"text": result.output}


async def _streams(reader: StreamReader, count: int) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    while len(seen) < count:
        event = await reader.next()
        if event.event == "stream":
            seen.append(event.data)
    return seen


async def _text_so_far(reader: StreamReader, text: str) -> dict[str, Any]:
    """Stream events until one stream's text so far ends with ``text``; its last event."""
    got: dict[str, str] = {}
    while True:
        [event] = await _streams(reader, 1)
        if "text" in event:
            got[event["stream"]] = got.get(event["stream"], "") + event["text"]
            if got[event["stream"]].endswith(text):
                return event


def _messages(api: Api) -> list[tuple[str, Any]]:
    import json
    return [(row["kind"], json.loads(row["body_json"])) for row in read_history(api.storage, "t")]


def test_the_answer_arrives_in_pieces_before_the_turn_settles_and_is_kept_once(
    clock: ManualClock,
) -> None:
    pen = Pen()
    api = make_api(clock, pen.extend)

    async def go() -> None:
        reader = await open_stream(api, "t")
        made = await submit(api, "t", {"text": "write"}, agent="writer")
        head = asyncio.ensure_future(api.space.runtime.process_thread_head("t"))
        pen.parts.put_nowait("Hel")
        first = await _text_so_far(reader, "Hel")
        assert (first["submission_id"], first["kind"]) == (made["id"], "message")
        pen.parts.put_nowait("lo ")
        pen.parts.put_nowait("world")
        await _text_so_far(reader, "lo world")
        assert not head.done()
        # The user's prompt is in the log; nothing of the answer is, until it ends.
        assert _messages(api) == [("message", {"role": "user", "text": "write"})]
        pen.parts.put_nowait(None)
        await head
        await reader.close()
        kinds = [kind for kind, _ in _messages(api)]
        assert kinds == ["message", "message", "pydantic_ai.messages", "submission.settled"]
        answer = _messages(api)[1][1]
        assert answer == {"role": "assistant", "text": "Hello world",
                          "stream": first["stream"]}

    run(go())


def test_a_request_that_fails_mid_stream_abandons_it_and_the_retry_streams_anew(
    clock: ManualClock,
) -> None:
    pen = Pen()
    api = make_api(clock, pen.extend)

    async def go() -> None:
        reader = await open_stream(api, "t")
        await submit(api, "t", {"text": "write"}, agent="writer")
        head = asyncio.ensure_future(api.space.runtime.process_thread_head("t"))
        pen.parts.put_nowait("the first try's ")
        first = await _text_so_far(reader, "the first try's ")
        pen.parts.put_nowait("!fail")
        while (ended := (await _streams(reader, 1))[0])["stream"] != first["stream"] \
                or "state" not in ended or ended["state"] == "open":
            pass
        assert ended["state"] == "abandoned"
        pen.parts.put_nowait("the second")
        second = await _text_so_far(reader, "the second")
        assert second["stream"] != first["stream"]
        pen.parts.put_nowait(None)
        await head
        await reader.close()
        assert pen.tries == 2
        answers = [body for kind, body in _messages(api)
                   if kind == "message" and body["role"] == "assistant"]
        assert answers == [{"role": "assistant", "text": "the second",
                            "stream": second["stream"]}]

    run(go())
