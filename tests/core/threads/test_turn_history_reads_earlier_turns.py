"""``turn.history``: an agent reads its Thread's earlier records for its context, newest
``limit`` oldest first, filtered by kind, paged with ``before``, bounded in bytes, and
journaled, so a replay gets the same list whatever was appended since."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadline import Application, Record, RuntimeConfig, Turn
from threadline.clock import ManualClock
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome


def _chat_app(seen: list[list[Record]], **ask: Any) -> Application:
    app = Application()

    @app.agent("chat")
    async def chat(turn: Turn) -> Any:
        seen.append(await turn.history(**ask))
        await turn.emit({"role": "user", "text": turn.input["text"]}, kind="message")
        await turn.emit({"role": "assistant", "text": "re: " + turn.input["text"]},
                        kind="message")
        return {"ok": True}

    return app


async def _three_turns(seen: list[list[Record]], **ask: Any) -> None:
    async with SimulatedObject(_chat_app(seen, **ask), clock=ManualClock(1_000_000)) as obj:
        for text in ("one", "two", "three"):
            obj.admit("chat", "chat", {"text": text})
            await obj.run_alarms()


def test_a_turn_reads_the_earlier_turns_oldest_first() -> None:
    async def scenario() -> None:
        seen: list[list[Record]] = []
        await _three_turns(seen)
        assert seen[0] == []
        texts = [(r.kind, r.body["text"] if r.kind == "message" else None)  # type: ignore[index]
                 for r in seen[2]]
        assert texts == [("message", "one"), ("message", "re: one"),
                         ("submission.settled", None),
                         ("message", "two"), ("message", "re: two"),
                         ("submission.settled", None)]
        assert [r.seq for r in seen[2]] == [1, 2, 3, 4, 5, 6]
        assert all(r.thread_id == "chat" for r in seen[2])

    asyncio.run(scenario())


def test_kinds_limit_and_before_choose_the_newest_matching_records() -> None:
    async def scenario() -> None:
        seen: list[list[Record]] = []
        await _three_turns(seen, kinds=["message"], limit=3)
        assert [r.body["text"] for r in seen[2]] == ["re: one", "two", "re: two"]  # type: ignore[index]

        paged: list[list[Record]] = []
        await _three_turns(paged, kinds=["message"], limit=3, before=4)
        assert [r.seq for r in paged[2]] == [1, 2]

    asyncio.run(scenario())


def test_a_replay_gets_the_journaled_list_not_what_was_appended_since() -> None:
    async def scenario() -> None:
        app = Application(RuntimeConfig(max_attempts=3))
        lists: list[list[int]] = []

        @app.agent("once")
        async def once(turn: Turn) -> Any:
            return "first"

        @app.agent("reads")
        async def reads(turn: Turn) -> Any:
            earlier = await turn.history()
            lists.append([r.seq for r in earlier])
            if turn.attempt == 1:
                await turn.emit({"during": "the first try"})
                raise RuntimeError("the model timed out")
            return len(earlier)

        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            obj.admit("t", "once", {})
            await obj.run_alarms()
            done = obj.admit("t", "reads", {}).id
            await obj.run_alarms()
            assert obj.submission(done).outcome is Outcome.COMPLETED
            assert obj.submission(done).result == 1
        # The first try's emit (seq 2) is in the log, but the retry's list is the first one.
        assert lists == [[1], [1]]

    asyncio.run(scenario())


def test_the_list_is_the_newest_run_of_records_that_fits_in_half_max_value_bytes() -> None:
    async def scenario() -> None:
        app = Application(RuntimeConfig(max_value_bytes=100_000))
        got: list[list[int]] = []

        @app.agent("writes")
        async def writes(turn: Turn) -> Any:
            for n in range(4):
                await turn.emit({"n": n, "pad": "x" * 20_000})

        @app.agent("reads")
        async def reads(turn: Turn) -> Any:
            got.append([r.seq for r in await turn.history()])

        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            obj.admit("t", "writes", {})
            obj.admit("t", "reads", {})
            await obj.run_alarms()
        # Four records of 20,016 bytes, then the settlement (92): the newest run that fits in
        # 50,000 bytes is the settlement and two records (40,124); a third would pass it.
        assert got == [[3, 4, 5]]

    asyncio.run(scenario())


@pytest.mark.parametrize("ask", [
    {"limit": 0}, {"limit": 501}, {"limit": True}, {"limit": 2.0}, {"before": 0},
    {"before": "5"}, {"kinds": "message"}, {"kinds": []}, {"kinds": ["bad kind"]},
], ids=lambda ask: repr(ask))
def test_a_bad_argument_fails_the_attempt_for_good(ask: dict[str, Any]) -> None:
    async def scenario() -> None:
        app = Application(RuntimeConfig(max_attempts=3))

        @app.agent("asks")
        async def asks(turn: Turn) -> Any:
            return await turn.history(**ask)

        async with SimulatedObject(app, clock=ManualClock(1_000_000)) as obj:
            done = obj.admit("t", "asks", {}).id
            await obj.run_alarms()
            failed = obj.submission(done)
            assert failed.outcome is Outcome.FAILED and failed.attempts == 1
            assert isinstance(failed.error, dict) and failed.error["type"] == "ValidationFailed"

    asyncio.run(scenario())
