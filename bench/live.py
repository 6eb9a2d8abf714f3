"""Scenarios 1, 2, 5, 7, 8 and 9 in real workerd (3 and 4 in ``bench.over_http``, 10 in
``bench.llm_live``), and the Agents SDK side by side (scenario 6, and 10's chat agent).

Both run in the local runtime through miniflare (``scripts/workerd/serve.mjs`` for threadline,
``bench/agents-sdk/serve.mjs`` for the Agents SDK, same miniflare). The figures are workerd's
billed cursor counters, summed per statement inside the object; the driver only polls routes
that run no metered SQL. Wall time inside workerd moves only across I/O, so ``wall_ms`` there
is coarse.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.model import (
    FIRE_NOTHING,
    FIRE_RUN,
    FIRE_SUBMIT,
    WORKERD,
    Measurement,
    ScenarioError,
    fire_case,
)
from bench.provider import ProviderProcess

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "workerd"))
sys.path.insert(0, str(ROOT / "bench" / "workerd"))

from bench_app import FIRES, SUBSCRIBED, SUBSCRIBER_NAMES  # noqa: E402
from workerd_runtime import Runtime  # noqa: E402

BUNDLE = ROOT / ".threadline" / "bundle-bench"
FAR_MS = 86_400_000
NEAR_MS = 1_000
#: Bound on every wait for the object to do something (seeding 10,000 takes minutes).
WAIT_S = 900.0


def build_bundle() -> Path:
    """Build (or reuse) the bench bundle: ``src/`` plus ``bench/workerd``."""
    subprocess.run(  # noqa: S603 (a fixed command line)
        [sys.executable, str(ROOT / "scripts" / "workerd" / "build.py"), "--out", str(BUNDLE),
         "--overlay", str(ROOT / "bench" / "workerd"), "--main", "bench_entry",
         "--durable-object", "BENCH=BenchThreadObject",
         *(f"--durable-object={binding}={cls}"
           for _, binding, cls in (*FIRES.values(), SUBSCRIBED))],
        check=True, stdout=subprocess.DEVNULL,
    )
    return BUNDLE


def poll(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Call ``check`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise ScenarioError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Bench:
    """The bench routes of one ``BenchThreadObject``."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.runtime = runtime
        self.name = name

    def call(self, op: str, **args: Any) -> Any:
        query = urlencode(args)
        # A pass that works through thousands of submissions without real I/O keeps the
        # object's input gate closed until it returns: a request can wait minutes then.
        reply = self.runtime.request(f"/_bench/{self.name}/{op}" + (f"?{query}" if query else ""),
                                     timeout=WAIT_S)
        if reply.status != 200:
            raise ScenarioError(f"{op}: HTTP {reply.status}: {reply.body[:500]!r}\n"
                                + self.runtime.output())
        return reply.json()

    def status(self, id: str = "") -> dict[str, Any]:
        return dict(self.call("status", id=id))

    def quiet(self) -> dict[str, Any] | None:
        """The status once nothing is open and no alarm is set, else None."""
        status = self.status()
        return status if status["open"] == 0 and status["alarm"] is None else None

    def alarms_since(self, since: int) -> list[dict[str, Any]]:
        return list(self.call("alarms", since=since)["alarms"])


def _sum_alarms(alarms: list[dict[str, Any]]) -> dict[str, float]:
    keys = ("rows_read", "rows_written", "statements", "set_alarm", "delete_alarm", "wall_ms")
    out: dict[str, float] = {key: sum(a[key] for a in alarms) for key in keys}
    out["alarms"] = len(alarms)
    return out


def _explain(alarms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: dict[str, list[int]] = {}
    for a in alarms:
        for entry in a["by_statement"]:
            row = merged.setdefault(entry["sql"], [0, 0, 0])
            row[0] += entry["count"]
            row[1] += entry["rows_read"]
            row[2] += entry["rows_written"]
    return [{"sql": sql, "count": c, "rows_read": r, "rows_written": w}
            for sql, (c, r, w) in merged.items()]


def caught_up(runtime: Runtime, settled: int, runs: int) -> Measurement:
    """Scenario 1 in workerd."""
    m = Measurement("1", WORKERD, f"settled={settled:,}")
    obj = Bench(runtime, f"caught-up-{settled}")
    if settled:
        obj.call("seed", n=settled, agent="unit", input='{"n": 1}', prefix="history")
    poll(obj.quiet, f"{settled} submissions to settle")
    for _ in range(runs):
        since = obj.status()["alarms"]
        obj.call("stale-alarm")
        poll(lambda since=since: obj.status()["alarms"] > since and obj.quiet(),
             "the stale alarm to run")
        alarms = obj.alarms_since(since)
        if len(alarms) != 1 or alarms[0]["phase"] != "caught-up":
            raise ScenarioError(f"expected one caught-up pass, got {alarms}")
        m.runs.append(_sum_alarms(alarms))
        if m.explain is None:
            m.explain = _explain(alarms)
    return m


def one_submission(runtime: Runtime, runs: int) -> list[Measurement]:
    """Scenario 2 in workerd: admission (the route's own cost) and execution (the alarms)."""
    admission = Measurement("2", WORKERD, "admission")
    execution = Measurement("2", WORKERD, "execution")
    total = Measurement("2", WORKERD, "end to end")
    obj = Bench(runtime, "one-submission")
    poll(obj.quiet, "the object to be quiet")
    # One unmeasured submission first: the object's first-ever rows (its lanes) are not the
    # cost of a unit of work.
    warm = obj.call("admit", thread="warm-up", agent="unit", input="{}")["id"]
    poll(lambda: obj.status(warm)["state"] == "settled" and obj.quiet(), "the warm-up")
    for run in range(runs):
        since = obj.status()["alarms"]
        admitted = obj.call("admit", thread=f"unit-{run}", agent="unit",
                            input=json.dumps({"n": run}))
        done = admitted["id"]
        poll(lambda done=done: obj.status(done)["state"] == "settled" and obj.quiet(),
             "the submission to settle")
        alarms = obj.alarms_since(since)
        cost = admitted["cost"]
        admit_figures: dict[str, float] = {
            key: cost[key] for key in ("rows_read", "rows_written", "statements", "set_alarm",
                                       "delete_alarm")
        }
        admit_figures["alarms"] = 0
        exec_figures = _sum_alarms(alarms)
        admission.runs.append(admit_figures)
        execution.runs.append({k: v for k, v in exec_figures.items() if k != "wall_ms"})
        total.runs.append({k: admit_figures[k] + exec_figures[k] for k in admit_figures})
        if run == 0:
            admission.explain = cost["by_statement"]
            execution.explain = _explain(alarms)
    return [admission, execution, total]


def pending_timers(runtime: Runtime, k: int, runs: int) -> Measurement:
    """Scenario 5 in workerd: ``k`` far timers pending, one near one falls due."""
    m = Measurement("5", WORKERD, f"K={k:,}")
    obj = Bench(runtime, f"timers-{k}")
    obj.call("seed", n=k, agent="sleeper", input=json.dumps({"ms": FAR_MS}), prefix="far")

    def far_only() -> bool:
        s = obj.status()
        return bool(s["open_timers"] == k and s["alarm"] is not None
                    and s["alarm"] > s["now"] + FAR_MS // 2)

    poll(far_only, f"{k} timers to be pending")
    for run in range(runs):
        admitted = obj.call("admit", thread=f"near-{run}", agent="sleeper",
                            input=json.dumps({"ms": NEAR_MS}))

        def near_pending() -> bool:
            s = obj.status()
            return bool(s["open_timers"] == k + 1 and s["alarm"] is not None
                        and s["alarm"] < s["now"] + FAR_MS // 2)

        poll(near_pending, "the near timer to be pending")
        since = obj.status()["alarms"]
        done = admitted["id"]
        poll(lambda done=done: obj.status(done)["state"] == "settled" and far_only(),
             "the near timer to be served")
        alarms = obj.alarms_since(since)
        m.runs.append(_sum_alarms(alarms))
        if m.explain is None:
            m.explain = _explain(alarms)
    return m


def pending_delayed(runtime: Runtime, k: int, runs: int, *, whole: bool = False
                    ) -> list[Measurement]:
    """Scenario 7 in workerd: ``k`` far delayed submissions pending, one near one falls due;
    the alarm that admits it into its Thread's FIFO (told apart by the rows it took out of
    ``tl_delayed``). With ``whole``, also what one delayed submission costs from its
    admission (the route's own work, as scenario 2 measures it) to its settlement: the
    admission, the alarm that admits it, and the alarm(s) after it (``execution``)."""
    m = Measurement("7", WORKERD, f"K={k:,}")
    admission = Measurement("7", WORKERD, "admission")
    execution = Measurement("7", WORKERD, "execution")
    total = Measurement("7", WORKERD, "end to end")
    obj = Bench(runtime, f"delayed-{k}")
    obj.call("seed", n=k, agent="unit", input=json.dumps({"n": 1}), prefix="far",
             delay_ms=FAR_MS)

    def far_only() -> bool:
        s = obj.status()
        return bool(s["scheduled"] == k and s["open"] == 0 and s["alarm"] is not None
                    and s["alarm"] > s["now"] + FAR_MS // 2)

    poll(far_only, f"{k} delayed submissions to be pending")
    for _ in range(runs):
        since = obj.status()["alarms"]
        admitted = obj.call("admit", thread=f"near-{since}", agent="unit",
                            input=json.dumps({"n": since}), delay_ms=NEAR_MS)
        if admitted["state"] != "scheduled":
            raise ScenarioError(f"the near submission is {admitted['state']}, not scheduled")
        done = admitted["id"]
        poll(lambda done=done: obj.status(done)["state"] == "settled" and far_only(),
             "the near submission to be admitted and run")
        alarms = obj.alarms_since(since)
        at = [i for i, a in enumerate(alarms) if a["admitted"]]
        if len(at) != 1 or alarms[at[0]]["admitted"] != 1:
            raise ScenarioError(f"expected one alarm admitting one submission: {alarms}")
        m.runs.append(_sum_alarms(alarms[at[0]:at[0] + 1]))
        cost = admitted["cost"]
        admit_figures: dict[str, float] = {
            key: cost[key] for key in ("rows_read", "rows_written", "statements", "set_alarm",
                                       "delete_alarm")
        }
        admit_figures["alarms"] = 0
        admission.runs.append(admit_figures)
        ran = {key: value for key, value in _sum_alarms(alarms[at[0] + 1:]).items()
               if key != "wall_ms"}
        execution.runs.append(ran)
        total.runs.append({key: admit_figures[key] + m.runs[-1][key] + ran[key]
                           for key in admit_figures})
        if m.explain is None:
            m.explain = _explain(alarms[at[0]:at[0] + 1])
    return [m, admission, execution, total] if whole else [m]


def schedule_fires(runtime: Runtime, schedules: int, submit: bool, runs: int
                   ) -> list[Measurement]:
    """Scenario 8 in workerd: ``schedules`` schedules declared, only ``pulse`` falls due (every
    two seconds of real time); the alarm that runs one fire of it (told apart by the
    schedule's ``last_fire`` it moved), and with ``submit`` the alarm after it, which must
    settle the fire's submission. The object's first fire is not measured."""
    name = FIRES[(schedules, submit)][0]
    fire = Measurement("8", WORKERD,
                       fire_case(schedules, FIRE_SUBMIT if submit else FIRE_NOTHING))
    ran = Measurement("8", WORKERD, fire_case(schedules, FIRE_RUN))
    obj = Bench(runtime, name)
    obj.status()  # the first request starts the object, and with it its schedules
    # With ``submit``, one more fire: the run of the last measured one is then over.
    wanted = runs + 1 + (1 if submit else 0)

    def fired() -> list[dict[str, Any]] | None:
        alarms = obj.alarms_since(0)
        return alarms if sum(1 for a in alarms if a["fired"]) >= wanted else None

    try:
        alarms = poll(fired, f"{wanted} fires of {name}")
    finally:
        obj.call("stop")
    at = [i for i, a in enumerate(alarms) if a["fired"]]
    for i, following in zip(at[1 : runs + 1], [*at[2:], len(alarms)], strict=False):
        if [schedule for schedule, _ in alarms[i]["fired"]] != ["pulse"]:
            raise ScenarioError(f"expected pulse alone to fire: {alarms[i]}")
        fire.runs.append(_sum_alarms(alarms[i : i + 1]))
        if fire.explain is None:
            fire.explain = _explain(alarms[i : i + 1])
        if submit:
            after = alarms[i + 1 : following]
            if len(after) != 1 or after[0]["settled"] != 1:
                raise ScenarioError(f"expected the next alarm to run the fire's submission, "
                                    f"alone, before the next fire: {after}")
            ran.runs.append(_sum_alarms(after))
            if ran.explain is None:
                ran.explain = _explain(after)
    return [fire, ran] if submit else [fire]


def subscriber_batches(runtime: Runtime, runs: int) -> list[Measurement]:
    """Scenario 9 in workerd: rows written per delivered batch, per subscriber (5 submissions
    on 5 Threads per run, each emitting one record); the cursor rows are workerd's billed
    ``rowsWritten`` of the subscribers' cursor statements."""
    out = {name: Measurement("9", WORKERD, f"{name}: rows written per delivered batch")
           for name in SUBSCRIBER_NAMES}
    obj = Bench(runtime, SUBSCRIBED[0])
    poll(obj.quiet, "the object to be quiet")
    warm = obj.call("admit", thread="warm-up", agent="unit", input="{}")["id"]
    poll(lambda: obj.status(warm)["state"] == "settled" and obj.quiet(), "the warm-up")
    for run in range(runs):
        since = obj.status()["alarms"]
        before = obj.call("publication")["batches"]
        obj.call("seed", n=5, agent="unit", input=json.dumps({"n": run}), prefix=f"sub-{run}")
        poll(lambda since=since: obj.status()["alarms"] > since and obj.quiet(),
             "the records to be delivered")
        after = obj.call("publication")["batches"]
        batches = {name: after.get(name, 0) - before.get(name, 0) for name in SUBSCRIBER_NAMES}
        if not all(batches.values()):
            raise ScenarioError(f"a subscriber got no batch: {batches}")
        statements = [entry for alarm in obj.alarms_since(since)
                      for entry in alarm["by_statement"]]
        cursor_rows = sum(entry["rows_written"] for entry in statements
                          if entry["sql"].startswith("UPDATE tl_subscribers SET cursor"))
        # What delivering read: the log's pages past the cursors and the cursor rows.
        delivery_reads = sum(
            entry["rows_read"] for entry in statements
            if entry["sql"].startswith(("UPDATE tl_subscribers SET cursor",
                                        "SELECT pos, thread_id"))
        )
        for name in SUBSCRIBER_NAMES:
            out[name].runs.append({"rows_read": delivery_reads / sum(batches.values()),
                                   "rows_written": cursor_rows / sum(batches.values()),
                                   "batches": batches[name]})
    return list(out.values())


def run(runner: Any, systems: list[str], plan: dict[str, Any], runs: int,
        explain: bool) -> None:
    """Run the live scenarios of ``systems`` (``workerd``, ``agents``) through ``runner``.

    One fake model provider (its own process) serves both runtimes' chat agents
    (scenario 10): each runtime's ``MODEL_URL`` names it."""
    provider = ProviderProcess()
    runner.step("fake provider: start", lambda: _nothing(provider.start()))
    try:
        if "workerd" in systems:
            runner.step("workerd: build the bench bundle", lambda: _nothing(build_bundle()))
            with tempfile.TemporaryDirectory(prefix="threadline-bench-") as state:
                runtime = Runtime(BUNDLE, Path(state), {"MODEL_URL": provider.url})
                runner.step("workerd: start and boot Pyodide",
                            lambda: _nothing(_start(runtime)))
                try:
                    if runtime.url:
                        _threadline_live(runner, runtime, plan, runs, provider)
                finally:
                    runtime.stop()
        if "agents" in systems:
            from bench import agents_sdk

            agents_sdk.run(runner, plan, runs, provider)
    finally:
        provider.stop()


def _nothing(_: object) -> list[Measurement]:
    return []


def _start(runtime: Runtime) -> bool:
    runtime.start()
    runtime.warm()
    return True


def _threadline_live(runner: Any, runtime: Runtime, plan: dict[str, Any], runs: int,
                     provider: ProviderProcess) -> None:
    for n in plan["settled"]:
        runner.step(f"1 caught-up pass, {n:,} settled [workerd]",
                    lambda n=n: caught_up(runtime, n, runs))
    runner.step("2 one submission [workerd]", lambda: one_submission(runtime, runs))
    from bench import over_http

    n, threads = plan["burst"]
    runner.step(f"3 burst of {n:,} over {threads} Threads over HTTP [workerd]",
                lambda: over_http.burst(runtime, n, threads, runs))
    runner.step(f"4 {plan['turns']:,} sequential echo turns over HTTP + SSE [workerd]",
                lambda: over_http.turns(runtime, plan["turns"], runs))
    for k in plan["k"]:
        runner.step(f"5 K={k:,} pending timers [workerd]",
                    lambda k=k: pending_timers(runtime, k, runs))
    for k in plan["k"]:
        runner.step(f"7 K={k:,} pending delayed submissions [workerd]",
                    lambda k=k: pending_delayed(runtime, k, runs, whole=k == plan["k"][0]))
    for submit in (False, True):
        for n in plan["schedules"]:
            runner.step(f"8 N={n:,} schedules, one fire {_submitting(submit)} [workerd]",
                        lambda n=n, submit=submit: schedule_fires(runtime, n, submit, runs))
    runner.step("9 rows written per delivered batch, per subscriber [workerd]",
                lambda: subscriber_batches(runtime, runs))
    if provider.url:
        from bench import llm_live

        llm = plan["llm"]
        runner.step(f"10 {llm['threads']} chat turns at once over HTTP + SSE [workerd]",
                    lambda: llm_live.turns(runtime, provider, llm, runs))


def _submitting(submit: bool) -> str:
    return "submitting one" if submit else "submitting nothing"
