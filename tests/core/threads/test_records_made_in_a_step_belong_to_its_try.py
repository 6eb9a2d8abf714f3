"""A record emitted (or a stream closed) inside a step belongs to that try of the step.

It commits with the step's journal entry: a try that fails stores nothing, and the retry's
records are its own, never dropped as "already emitted" nor mixed with the failed try's.
Outside a step, ``emit`` commits at once as before; ``stream`` is refused.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from threadline import Application, RetryPolicy, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.history import read_history
from threadline.threads.model import Outcome
from threadline.threads.turn_base import STEP_FINISHED

START = 1_000_000


def _run(app: Application, agent: str, crash: str | None = None) -> tuple[Any, list[Any]]:
    async def scenario() -> tuple[Any, list[Any]]:
        async with SimulatedObject(app, clock=ManualClock(START)) as obj:
            if crash is not None:
                obj.crash_at(crash)
            made = obj.admit("t", agent, {}).id
            await obj.run_alarms(until=START + 3_600_000)
            rows = read_history(obj.storage, "t")
            return obj.submission(made), [(row["kind"], json.loads(row["body_json"]))
                                          for row in rows if row["kind"] != "submission.settled"]

    return asyncio.run(scenario())


def test_a_failed_tries_records_are_not_kept_and_the_retrys_are() -> None:
    app = Application()
    tries: list[int] = []

    @app.agent("tool")
    async def tool(turn: Turn) -> Any:
        async def call() -> int:
            tries.append(len(tries) + 1)
            await turn.emit({"try": len(tries), "note": "calling the tool"}, kind="tool.call")
            if len(tries) == 1:
                raise ConnectionError("reset")
            await turn.emit({"try": len(tries), "note": "the tool answered"}, kind="tool.result")
            return len(tries)
        return await turn.step("tool", call, retry=RetryPolicy(max_attempts=2))

    done, records = _run(app, "tool")
    assert done.result == 2
    assert records == [("tool.call", {"try": 2, "note": "calling the tool"}),
                       ("tool.result", {"try": 2, "note": "the tool answered"})]


def test_a_failed_attempts_records_are_not_kept_and_the_next_attempts_are() -> None:
    app = Application(RuntimeConfig(max_attempts=2))
    runs: list[int] = []

    @app.agent("tool")
    async def tool(turn: Turn) -> Any:
        async def call() -> int:
            runs.append(turn.attempt)
            await turn.emit({"attempt": turn.attempt})
            if turn.attempt == 1:
                raise ConnectionError("reset")
            return turn.attempt
        return await turn.step("tool", call)

    done, records = _run(app, "tool")
    assert done.result == 2
    assert records == [("record", {"attempt": 2})]


def test_records_of_a_finished_step_are_kept_once_across_a_replay() -> None:
    app = Application()
    calls: list[int] = []

    @app.agent("once")
    async def once(turn: Turn) -> Any:
        async def call() -> str:
            calls.append(1)
            await turn.emit({"said": "hello"})
            async with turn.stream(meta={"model": "fake"}) as stream:
                await stream.write("streamed ")
                await stream.write("text")
            return "done"
        return await turn.step("say", call)

    done, records = _run(app, "once", crash=STEP_FINISHED)
    assert done.outcome is Outcome.COMPLETED
    assert len(calls) == 1  # the replay met the finished step
    assert [kind for kind, _ in records] == ["record", "message"]
    assert records[1][1]["text"] == "streamed text" and records[1][1]["model"] == "fake"


def test_a_stream_outside_a_step_fails_the_attempt_for_good() -> None:
    app = Application()

    @app.agent("bare")
    async def bare(turn: Turn) -> Any:
        async with turn.stream() as stream:
            await stream.write("x")

    done, records = _run(app, "bare")
    assert done.outcome is Outcome.FAILED and done.attempts == 1
    assert done.error["type"] == "ValidationFailed"
    assert "inside a step" in done.error["message"]
    assert records == []


def test_a_streams_meta_cannot_set_its_text_or_id() -> None:
    app = Application()

    @app.agent("sneaky")
    async def sneaky(turn: Turn) -> Any:
        async def call() -> None:
            async with turn.stream(meta={"text": "forged"}) as stream:
                await stream.write("real")
        await turn.step("say", call)

    done, records = _run(app, "sneaky")
    assert done.outcome is Outcome.FAILED
    assert "may not set 'text'" in done.error["message"]
    assert records == []


def test_a_stream_past_max_value_bytes_fails_for_good_and_stores_nothing() -> None:
    app = Application(RuntimeConfig(max_value_bytes=1_024))

    @app.agent("long")
    async def long(turn: Turn) -> Any:
        async def call() -> None:
            async with turn.stream() as stream:
                for _ in range(20):
                    await stream.write("x" * 100)
        await turn.step("say", call)

    done, records = _run(app, "long")
    assert done.outcome is Outcome.FAILED and done.attempts == 1
    assert done.error["type"] == "ValueTooLarge"
    assert records == []


def test_a_record_made_after_its_step_ended_is_refused_not_lost() -> None:
    app = Application()
    late: list[str] = []

    @app.agent("leaky")
    async def leaky(turn: Turn) -> Any:
        started = asyncio.Event()

        async def after_the_step() -> None:
            await started.wait()
            try:
                await turn.emit({"late": True})
            except Exception as error:  # what the leaked task is told
                late.append(str(error))

        async def call() -> str:
            spawned.append(asyncio.ensure_future(after_the_step()))
            return "done"

        spawned: list[Any] = []
        value = await turn.step("spawn", call)
        started.set()
        await spawned[0]
        return value

    done, records = _run(app, "leaky")
    assert done.outcome is Outcome.COMPLETED
    assert late == ["the step this record belongs to has ended"]
    assert records == []
