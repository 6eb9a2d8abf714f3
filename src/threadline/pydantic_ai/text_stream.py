"""A model's streamed text, handed to the Thread's readers through ``turn.stream``.

Pydantic AI delivers a streamed model response's events live to the capability's event handler
inside the model request's durable unit, which here is the request's step. :func:`stream_text`
opens a ``turn.stream`` at the response's first text and writes each text delta to it as it
arrives; when the response ends, the stream closes into ONE record of the message kind
(``{"role": "assistant", "text", "stream"}``) that commits with the step. A response with no
text (only tool calls) stores nothing. A try of the step that fails abandons its stream (its
readers are told, nothing is stored) and the retry streams under a new id, as for any step.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from contextlib import AsyncExitStack
from typing import Any

from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.tools import RunContext

from threadline.pydantic_ai.active_run import active_run
from threadline.threads.turn_stream import TextStream

#: What a streamed message's record says besides its text.
MESSAGE_META = {"role": "assistant"}


def text_of(event: AgentStreamEvent) -> str:
    """The text ``event`` adds to a model response ("" when it adds none)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


async def stream_text(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
    """The capability's event handler: write a model response's text to a ``turn.stream``.

    Outside a durable run, and for the events of a tool call (which come outside any step),
    there is no text to write and the events are only read.
    """
    run = active_run()
    async with AsyncExitStack() as scope:
        stream: TextStream | None = None
        async for event in events:
            delta = text_of(event)
            if not delta or run is None:
                continue
            if stream is None:
                stream = await scope.enter_async_context(
                    run.turn.stream(kind=run.message_kind, meta=dict(MESSAGE_META)))
            await stream.write(delta)


__all__ = ["MESSAGE_META", "stream_text", "text_of"]
