"""Scenario 6: the Cloudflare Agents SDK (npm ``agents``, pinned in ``bench/agents-sdk``) in the
same miniflare, metered by a thin wrapper around ``ctx.storage.sql.exec`` (see its worker.js).

(a) K pending ``schedule()``s with one due: rows read and written by the alarm(s) serving it.
(b) one unit of work through ``queue()``: the call itself, then the alarms until it has run.

Scenario 10's chat turns go through its ``AIChatAgent`` (``bench.agents_chat``).

Scenario 3's burst goes through it too (:func:`burst`): ``n`` ``queue()`` items POSTed to its
HTTP entry by the driver that bursts into threadline (``bench.over_http.drive``), into one
agent (one object, as threadline's burst goes into one space's object).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.live import poll
from bench.model import AGENTS, Measurement, ScenarioError

HERE = Path(__file__).resolve().parent / "agents-sdk"
FAR_S = 86_400
NEAR_S = 1


class AgentsRuntime:
    """``bench/agents-sdk/serve.mjs``: esbuild bundle + miniflare, on a free port."""

    def __init__(self, model_url: str = "") -> None:
        #: The fake model provider the chat agent streams from (scenario 10).
        self.model_url = model_url
        self.url = ""
        self.process: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    def start(self, timeout: float = 60.0) -> None:
        self.process = subprocess.Popen(  # noqa: S603 (a fixed command line)
            ["node", str(HERE / "serve.mjs")],  # noqa: S607 (node from PATH, as scripts/dev)
            cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "MODEL_URL": self.model_url} if self.model_url else None,
        )
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.log.append(line.rstrip("\n"))
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self.url:
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise ScenarioError("the Agents SDK runtime did not start:\n"
                                    + "\n".join(self.log[-40:]))
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line.startswith("ready "):
                self.url = line.split(" ", 1)[1].strip()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def call(self, agent: str, op: str, **args: Any) -> Any:
        query = urlencode(args)
        url = f"{self.url}/_agents/{agent}/{op}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=300) as reply:  # noqa: S310 (local URL)
                return json.loads(reply.read())
        except Exception as exc:
            raise ScenarioError(f"{op}: {exc}\n" + "\n".join(self.log[-40:])) from exc


def _figures(cost: dict[str, Any], alarms: int) -> dict[str, float]:
    return {
        "rows_read": cost["rowsRead"],
        "rows_written": cost["rowsWritten"],
        "statements": cost["statements"],
        "set_alarm": cost["setAlarm"],
        "delete_alarm": cost["deleteAlarm"],
        "alarms": alarms,
    }


def _sum(alarms: list[dict[str, Any]]) -> dict[str, float]:
    keys = ("rowsRead", "rowsWritten", "statements", "setAlarm", "deleteAlarm")
    out = _figures({key: sum(a[key] for a in alarms) for key in keys}, len(alarms))
    out["wall_ms"] = sum(a["wallMs"] for a in alarms)
    return out


def schedules(rt: AgentsRuntime, k: int, runs: int) -> Measurement:
    """(a) K pending schedules, one due."""
    m = Measurement("6", AGENTS, f"schedule() K={k:,}")
    agent = f"schedules-{k}"
    rt.call(agent, "seed", k=k, seconds=FAR_S)

    def far_only() -> dict[str, Any] | None:
        s = rt.call(agent, "status")
        ok = s["jobs"] == k and s["alarm"] is not None and s["alarm"] > s["now"] + FAR_S * 500
        return s if ok else None

    poll(far_only, f"{k} schedules to be pending")
    for run in range(runs):
        status = rt.call(agent, "status")
        ticks, since = status["ticks"], status["alarms"]
        rt.call(agent, "schedule", seconds=NEAR_S, n=run)
        poll(lambda ticks=ticks: rt.call(agent, "status")["ticks"] > ticks and far_only(),
             "the due schedule to run")
        alarms = rt.call(agent, "alarms", since=since)["alarms"]
        m.runs.append(_sum(alarms))
    return m


def unit_of_work(rt: AgentsRuntime, runs: int) -> list[Measurement]:
    """(b) one item through queue(): the call, then the alarms until it ran."""
    admission = Measurement("6", AGENTS, "queue() admission")
    execution = Measurement("6", AGENTS, "queue() execution")
    total = Measurement("6", AGENTS, "queue() end to end")
    agent = "unit-of-work"
    # One unmeasured item first: the agent's first-ever rows (its tables) are not the cost of
    # a unit of work.
    rt.call(agent, "queue", n=-1)
    poll(lambda: rt.call(agent, "status")["done"] == 1, "the warm-up item to run")
    poll(lambda: rt.call(agent, "status")["alarm"] is None, "the agent to be quiet")
    for run in range(runs):
        status = rt.call(agent, "status")
        since, done = status["alarms"], status["done"]
        queued = rt.call(agent, "queue", n=run)

        def finished(done: int = done) -> bool:
            s = rt.call(agent, "status")
            return bool(s["done"] > done and s["alarm"] is None and s["jobs"] == 0)

        poll(finished, "the queued item to run")
        alarms = rt.call(agent, "alarms", since=since)["alarms"]
        admit = _figures(queued["cost"], 0)
        execute = _sum(alarms)
        admission.runs.append(admit)
        execution.runs.append({k: v for k, v in execute.items() if k != "wall_ms"})
        total.runs.append({key: admit[key] + execute[key] for key in admit})
    return [admission, execution, total]


def burst_run(rt: AgentsRuntime, agent: str, n: int) -> dict[str, float]:
    """Scenario 3's burst through the Agents SDK: ``n`` ``queue()`` items over its HTTP entry
    into one fresh agent, ``CONCURRENCY`` clients; settled = the item's callback ran."""
    import httpx

    from bench.over_http import SETTLE_S, burst_figures, drive, idle_samples, percentile

    def quiet() -> dict[str, Any] | None:
        s = rt.call(agent, "status")
        return s if s["alarm"] is None and s["jobs"] == 0 else None

    rt.call(agent, "queue", n=-1)  # the agent's first rows (its tables) are not the burst's
    poll(lambda: rt.call(agent, "progress")["done"] == 1 and quiet(), "the warm-up item")
    idle: list[float] = []
    for i in range(idle_samples(n)):
        sent = time.perf_counter()
        rt.call(agent, "queue", n=f"i{i}")
        idle.append((time.perf_counter() - sent) * 1000)
        poll(lambda i=i: rt.call(agent, "progress")["done"] == i + 2 and quiet(),
             "an idle item to run")
    before = rt.call(agent, "progress")

    def post(client: httpx.Client, i: int) -> None:
        reply = client.get(f"/_agents/{agent}/queue", params={"n": i})
        if reply.status_code != 200:
            raise ScenarioError(f"queue() refused: HTTP {reply.status_code}: {reply.text[:300]}")

    admit_ms, _, started, admitted = drive(
        n, post, lambda: httpx.Client(base_url=rt.url, timeout=SETTLE_S))

    def all_done() -> dict[str, Any] | None:
        progress = rt.call(agent, "progress")
        return progress if progress["done"] - before["done"] >= n else None

    progress = poll(all_done, f"{n} queued items to run", timeout=SETTLE_S)
    settled = time.perf_counter()
    done = poll(quiet, "the agent to be quiet", timeout=SETTLE_S)
    if progress["done"] - before["done"] != n or done["jobs"] != 0:
        raise ScenarioError(f"expected {n} items run, got {progress} / {done}")
    return burst_figures(n, int(done["alarms"]) - int(before["alarms"]), admit_ms,
                         percentile(idle, 0.5), started, admitted, settled)


def burst(rt: AgentsRuntime, n: int, runs: int) -> Measurement:
    """Scenario 3 through the Agents SDK: ``runs`` bursts, each into a fresh agent."""
    from bench.over_http import CONCURRENCY

    m = Measurement("3", AGENTS, f"{n:,} queue() items into one agent, concurrency {CONCURRENCY}")
    for run in range(runs):
        m.runs.append(burst_run(rt, f"burst-{n}-{run}", n))
    return m


def run(runner: Any, plan: dict[str, Any], runs: int, provider: Any = None) -> None:
    """Start the Agents SDK runtime and run scenarios 3, 6 and (with the fake model
    ``provider``, a ``bench.provider.ProviderProcess``) 10 through ``runner``."""
    model_url = provider.url if provider is not None else ""
    rt = AgentsRuntime(model_url)
    runner.step("agents sdk: bundle and start", lambda: _started(rt))
    try:
        if rt.url:
            n = plan["burst"][0]
            runner.step(f"3 burst of {n:,} queue() items over HTTP [agents sdk]",
                        lambda: burst(rt, n, runs))
            for k in plan["k"]:
                runner.step(f"6a K={k:,} pending schedule()s [agents sdk]",
                            lambda k=k: schedules(rt, k, runs))
            runner.step("6b one unit of work through queue() [agents sdk]",
                        lambda: unit_of_work(rt, runs))
            if model_url:
                from bench import agents_chat

                llm = plan["llm"]
                runner.step(f"10 AIChatAgent, one message and {llm['threads']} at once over"
                            " WebSocket [agents sdk]",
                            lambda: agents_chat.chat(rt.url, provider, llm, runs))
    finally:
        rt.stop()


def _started(rt: AgentsRuntime) -> list[Measurement]:
    rt.start()
    return []
