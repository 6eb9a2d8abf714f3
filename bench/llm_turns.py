"""``python -m bench.llm_turns``: many Threads of one space each streaming a model's answer.

One simulated object (``threadline.testing.SimulatedObject``, SQLite, a manual clock, so the
times are simulated and the same on every run) serves ``--threads`` Threads, one turn each,
admitted at once. Each turn calls the fake provider (``threadline.testing.FakeProvider``) through
``turn.http`` and streams its ``--tokens`` tokens: ``--first-token-ms`` to the first one and
``--total-ms`` in all. Printed for each ``native_concurrency``: the time until every turn
settled (and its ratio to one such turn alone), admission to the first delta reaching the
object's live streams (what an open event stream sends at its next wake) p50 and p99, and rows
written per turn, with ``turn.stream`` and with one ``turn.emit`` per token. ``scripts/bench``
runs it as scenario 10's simulated figure (:func:`measurements`).

Usage: python -m bench.llm_turns [--threads 50] [--tokens 200] [--first-token-ms 1000]
    [--total-ms 2000] [--concurrency 2,16,64] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.model import Measurement
from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.api.http import Request
from threadline.testing import FakeFetch, FakeProvider, SimulatedObject
from threadline.threads.live_text import LiveStreams, LiveText

START = 1_700_000_000_000
URL = "https://models.bench/v1/chat/completions"


def chat_app(concurrency: int, *, per_token_emit: bool) -> Application:
    app = Application(RuntimeConfig(native_concurrency=concurrency))

    @app.agent("chat")
    async def chat(turn: Turn) -> Any:
        async def answer() -> str:
            text = ""
            async with turn.http.stream("POST", URL, json={
                    "stream": True, "messages": [{"role": "user", "content": "tell me"}]}
                    ) as model, turn.stream(kind="message") as out:
                async for line in model.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
                    if delta:
                        text += delta
                        await out.write(delta)
            return text

        async def answer_emitting() -> str:
            text = ""
            async with turn.http.stream("POST", URL, json={"stream": True}) as model:
                async for line in model.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
                        if delta:
                            text += delta
                            await turn.emit({"delta": delta}, kind="token")
            return text

        return {"text": await turn.step("model", answer_emitting if per_token_emit else answer)}

    return app


async def run(threads: int, concurrency: int, provider: FakeProvider, *,
              per_token_emit: bool = False) -> dict[str, Any]:
    clock = ManualClock(START)
    first_delta: dict[str, int] = {}
    write = LiveStreams.write

    def noted(self: LiveStreams, stream: LiveText, delta: str) -> None:
        first_delta.setdefault(stream.submission_id, clock.now_ms())
        write(self, stream, delta)

    LiveStreams.write = noted  # type: ignore[method-assign]
    try:
        async with SimulatedObject(chat_app(concurrency, per_token_emit=per_token_emit),
                                   clock=clock, http=FakeFetch(provider.handler(clock))) as obj:
            await obj.start()
            before = obj.storage.meter.reading()
            admitted_at = clock.now_ms()
            made = []
            for n in range(threads):
                # Over the HTTP surface, as a client would: an admission wakes the object.
                reply = await obj.space.handle(Request.from_url(
                    "POST", f"/v1/spaces/bench/threads/user-{n}/submissions", {},
                    json.dumps({"agent": "chat", "input": {}}).encode()))
                assert reply.status == 202, reply.body
                made.append(reply.json()["id"])
            started = time.perf_counter()
            await obj.run_alarms(max_passes=100_000)
            wall = time.perf_counter() - started
            cost = obj.storage.meter.reading() - before
            done = [obj.submission(made_id) for made_id in made]
            assert all(d.outcome is not None and d.outcome.value == "completed" for d in done), [
                d.error for d in done if d.error]
            settled = max(d.settled_at or 0 for d in done) - admitted_at
    finally:
        LiveStreams.write = write  # type: ignore[method-assign]
    waits = sorted(first_delta.get(m, 0) - admitted_at for m in made) if not per_token_emit \
        else []
    return {
        "threads": threads, "native_concurrency": concurrency, "settled_ms": settled,
        "first_delta_p50_ms": statistics.median(waits) if waits else None,
        "first_delta_p99_ms": waits[min(len(waits) - 1, int(len(waits) * 0.99))] if waits
        else None,
        "rows_written_per_turn": round(cost.rows_written / threads, 1),
        "rows_read_per_turn": round(cost.rows_read / threads, 1),
        "provider_max_in_flight": provider.max_in_flight,
        "wall_ms": round(wall * 1000),
    }


async def measure(threads: int, tokens: int, first_ms: int, total_ms: int,
                  levels: list[int]) -> dict[str, Any]:
    gap = (total_ms - first_ms) // max(1, tokens - 1)

    def provider() -> FakeProvider:
        return FakeProvider(tokens=tokens, first_token_ms=first_ms, token_gap_ms=gap)

    alone = await run(1, 1, provider())
    out: dict[str, Any] = {"tokens": tokens, "first_token_ms": first_ms, "token_gap_ms": gap,
                           "alone": alone, "runs": []}
    for level in levels:
        result = await run(threads, level, provider())
        result["ratio_to_alone"] = round(result["settled_ms"] / alone["settled_ms"], 2)
        out["runs"].append(result)
    out["emit_per_token"] = await run(threads, max(levels), provider(), per_token_emit=True)
    return out


def _figures(result: dict[str, Any]) -> dict[str, float]:
    figures: dict[str, float] = {
        "settled_s": result["settled_ms"] / 1000,
        "rows_read": result["rows_read_per_turn"],
        "rows_written": result["rows_written_per_turn"],
        "max_in_flight": result["provider_max_in_flight"],
    }
    if result["first_delta_p50_ms"] is not None:
        figures["p50_ms"] = result["first_delta_p50_ms"]
        figures["p99_ms"] = result["first_delta_p99_ms"]
    return figures


def measurements(plan: dict[str, Any]) -> list[Measurement]:
    """Scenario 10 of ``scripts/bench`` on simulated time, at the deployed default
    ``native_concurrency``: one turn alone, ``plan["threads"]`` at once with ``turn.stream``
    and with one ``turn.emit`` per token. One run: simulated time makes every run the same."""
    from bench.model import SIM

    threads = plan["threads"]
    level = RuntimeConfig().native_concurrency
    result = asyncio.run(measure(threads, plan["tokens"], plan["first_token_ms"],
                                 plan["total_ms"], [level]))
    alone = Measurement("10", SIM, "one turn alone (turn.stream)", [_figures(result["alone"])])
    many = _figures(result["runs"][0])
    many["ratio_to_alone"] = result["runs"][0]["ratio_to_alone"]
    return [alone,
            Measurement("10", SIM, f"{threads} Threads at once (turn.stream)", [many]),
            Measurement("10", SIM, f"{threads} Threads at once (one emit per token)",
                        [_figures(result["emit_per_token"])])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--first-token-ms", type=int, default=1_000)
    parser.add_argument("--total-ms", type=int, default=2_000)
    parser.add_argument("--concurrency", default="2,16,64")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    result = asyncio.run(measure(args.threads, args.tokens, args.first_token_ms, args.total_ms,
                                 levels))
    alone = result["alone"]
    print(f"one turn alone: settled {alone['settled_ms']} ms after admission, first delta "
          f"{alone['first_delta_p50_ms']} ms, {alone['rows_written_per_turn']} rows written")
    for figures in result["runs"]:
        level = figures["native_concurrency"]
        print(f"{figures['threads']} Threads, native_concurrency {level:>3}:"
              f" all settled in {figures['settled_ms']:>6} ms ({figures['ratio_to_alone']}x one"
              f" alone), first delta p50 {figures['first_delta_p50_ms']} ms p99"
              f" {figures['first_delta_p99_ms']} ms, {figures['rows_written_per_turn']}"
              f" rows written per turn (turn.stream), {figures['provider_max_in_flight']} model"
              f" calls at once at most, {figures['wall_ms']} ms of this machine's time")
    emitting = result["emit_per_token"]
    print(f"one turn.emit per token instead: {emitting['rows_written_per_turn']} rows written per"
          f" turn, all settled in {emitting['settled_ms']} ms")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
