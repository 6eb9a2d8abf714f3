"""The agents (and scenario 8's schedules) every benchmark scenario runs, in CPython and in
workerd alike."""

from __future__ import annotations

import inspect
import json
from datetime import timedelta
from typing import Any

from threadline import ScheduleContext
from threadline.app import Application
from threadline.threads import Turn

#: The deployed defaults: the benchmark measures what a user gets.
app = Application()


@app.agent("unit")
async def unit(turn: Turn) -> Any:
    """The simple submission: one journaled step, one emitted record."""
    result = await turn.step("work", lambda: {"got": turn.input})
    await turn.emit({"role": "assistant", "text": "done"})
    return result


@app.agent("sleeper")
async def sleeper(turn: Turn) -> Any:
    """One durable timer of ``input["ms"]`` milliseconds, then a result."""
    assert isinstance(turn.input, dict)
    await turn.sleep(sleep_duration(int(turn.input["ms"])))
    return {"slept_ms": turn.input["ms"]}


def sleep_duration(ms: int) -> Any:
    """``ms`` as ``Turn.sleep`` takes it: a ``sleep(ms)`` gets milliseconds, any other
    signature a ``timedelta`` (unambiguous whatever unit a plain number means there)."""
    params = list(inspect.signature(Turn.sleep).parameters)
    if len(params) > 1 and params[1] == "ms":
        return ms
    return timedelta(milliseconds=ms)



@app.agent("chat-per-token")
async def chat_per_token(turn: Turn) -> Any:
    """Scenario 10's other way: the example ``chat`` agent with one ``turn.emit`` per token of
    the model's answer instead of ``turn.stream`` (the provider is ``turn.env.MODEL_URL``)."""
    assert isinstance(turn.input, dict)
    text = str(turn.input["text"])
    await turn.emit({"role": "user", "text": text}, kind="message")

    async def answer() -> str:
        said = ""
        async with turn.http.stream(
                "POST", turn.env.MODEL_URL.rstrip("/") + "/chat/completions",
                json={"model": "fake-model", "stream": True,
                      "messages": [{"role": "user", "content": text}]}) as model:
            await model.raise_for_status()
            async for line in model.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    delta = choices[0].get("delta", {}).get("content")
                    if delta:
                        said += delta
                        await turn.emit({"delta": delta}, kind="token")
        return said

    return {"text": await turn.step("model", answer)}

#: Scenario 8: the schedule that falls due (``pulse``) fires every two seconds of real time in
#: workerd, far enough apart that a fire's alarm and its submission's run are never one alarm
#: with the next fire's.
PULSE_EVERY = timedelta(seconds=2)
#: The other schedules of scenario 8: declared, never due while the benchmark runs.
IDLE_EVERY = timedelta(days=300)
PULSE_THREAD = "pulse"
#: Scenario 8's objects in workerd, by (schedules declared, whether a fire submits): the object
#: name the driver uses, its Durable Object binding and class (``bench_entry``).
FIRES = {
    (1, False): ("fires-1", "FIRES_1", "FiresOne"),
    (100, False): ("fires-100", "FIRES_100", "FiresHundred"),
    (1, True): ("fires-1-submit", "FIRES_1_SUBMIT", "FiresOneSubmit"),
    (100, True): ("fires-100-submit", "FIRES_100_SUBMIT", "FiresHundredSubmit"),
}


def schedule_app(schedules: int, submit: bool) -> Application:
    """Scenario 8's application: the ``unit`` agent and ``schedules`` schedules, of which only
    ``pulse`` (every :data:`PULSE_EVERY`) falls due. Its function does nothing, or, with
    ``submit``, submits one ``unit`` submission to the Thread :data:`PULSE_THREAD` (once per
    fire: the default key comes from the fire time)."""
    scheduled = Application()
    scheduled.agent("unit")(unit)

    @scheduled.every(PULSE_EVERY, id="pulse")
    async def pulse(ctx: ScheduleContext) -> None:
        if submit:
            await ctx.submit(PULSE_THREAD, {"fire": ctx.fire_ms}, agent="unit")

    async def idle(ctx: ScheduleContext) -> None:
        return None

    for n in range(schedules - 1):
        scheduled.every(IDLE_EVERY, id=f"idle-{n}")(idle)
    return scheduled


#: Scenario 9's object: its name, Durable Object binding and class (``bench_entry``).
SUBSCRIBED = ("subscribers", "SUBSCRIBED", "Subscribed")
#: Scenario 9's subscribers.
SUBSCRIBER_NAMES = ("callable", "required")


def subscriber_app() -> Application:
    """Scenario 9's application: the ``unit`` agent, a callable subscriber and a required one
    (both take every record and do nothing with it)."""
    subscribed = Application()
    subscribed.agent("unit")(unit)

    async def consume(batch: list[Any]) -> None:
        del batch

    subscribed.subscriber("callable", batch=100)(consume)
    subscribed.subscriber("required", required=True, batch=100)(consume)
    return subscribed
