"""Scenarios 3 and 4 in workerd, over the HTTP API (``/v1``, bearer token, SSE events).

The bench Worker binds every space to ``BenchThreadObject``, so the object that admits the API's
submissions is the metered one: its alarm handler records each run, and the driver reads those
records through ``/_bench/{space}/progress`` (no SQL) and ``/_bench/{space}/status``
(unmetered reads).

3. Burst: ``n`` ``echo`` submissions spread round-robin over ``threads`` Threads of one space,
   POSTed by ``CONCURRENCY`` driver threads (one keep-alive connection each). Per run: alarm
   handler runs per submission (counted from the first POST until the object is quiet),
   settlements per second (``n`` over the time from sending the first POST to the driver's
   first poll that sees every submission settled; polling starts once every POST has been
   answered, so it never competes with admission), and the POSTs' round trips (p50, p99, max),
   with the passes' durations and the round trips of the POSTs that overlapped a pass beside
   those that did not (see :func:`_gate`), and beside them the p50 of admissions into the
   idle object (:func:`idle_samples` sequential POSTs, each after the last settled). The same
   burst goes through the Agents SDK (``bench.agents_sdk.burst``) with the same driver.
4. Latency of a turn: ``n`` sequential ``echo`` submissions on one Thread while its event stream
   is open (see ``tests/workerd/echo_turns.py`` for what each figure measures and on which
   clock). Per run: p50 and p99 of each figure over its ``n`` turns.

Every figure of a run is reported as the median over the runs with min and max (for the
latency percentiles: each run's p50 and p99, then the median of those over the runs).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import count
from typing import Any

import httpx
from httpx_sse import connect_sse

from bench.live import ROOT, Bench, poll
from bench.model import WORKERD, Measurement, ScenarioError

# The helpers the workerd latency test uses too, and the runtime driver.
sys.path.insert(0, str(ROOT / "tests" / "workerd"))

from echo_turns import (
    ADMIT,
    ATTEMPT_CLIENT,
    ATTEMPT_OBJECT,
    FIRST_RECORD,
    object_clock,
    percentile,
    skip_to_record,
    submit_echo,
    thread_path,
    timed_turn,
)
from workerd_runtime import TOKEN, Runtime

CONCURRENCY = 8
#: Bound on one burst settling (1,000 echo runs take seconds when healthy).
SETTLE_S = 300.0
#: Scenario 4's cases: (figure of ``echo_turns``, case label in the table).
TURN_CASES = [
    (ATTEMPT_OBJECT, "admission -> Attempt start (object clock)"),
    (ATTEMPT_CLIENT, "admission -> Attempt start (seen on SSE)"),
    (FIRST_RECORD, "admission -> first SSE record"),
    (ADMIT, "admission (POST round trip)"),
]


def _client(runtime: Runtime) -> httpx.Client:
    return httpx.Client(base_url=runtime.url, headers={"authorization": f"Bearer {TOKEN}"},
                        timeout=SETTLE_S)


def _warm(runtime: Runtime, space: str) -> Bench:
    """A fresh space, started and warmed by one unmeasured echo run, then quiet."""
    obj = Bench(runtime, space)
    with _client(runtime) as client:
        done = submit_echo(client, thread_path(space, "warm-up"), "warm")
    poll(lambda: obj.status(done)["state"] == "settled" and obj.quiet(), "the warm-up")
    return obj


#: Sequential admissions into an idle object per run (fewer for a small burst, as --quick
#: runs): the idle p50 the burst's is set beside.
IDLE_SAMPLES = 15


def idle_samples(n: int) -> int:
    """How many idle admissions go with a burst of ``n``."""
    return max(5, min(IDLE_SAMPLES, n // 20))


def drive(n: int, post: Callable[[Any, int], None], client: Callable[[], Any]
          ) -> tuple[list[float], list[tuple[float, float]], float, float]:
    """POST ``n`` admissions from ``CONCURRENCY`` driver threads (one keep-alive ``client()``
    each): every round trip (ms), each POST's (sent, answered) on the wall clock (ms), and
    the ``perf_counter`` at the first POST and once every POST was answered. The same driver
    bursts into threadline and into the Agents SDK."""
    numbers = count()
    lock = threading.Lock()
    admit_ms: list[float] = []
    spans: list[tuple[float, float]] = []

    def worker() -> None:
        with client() as session:
            while True:
                with lock:
                    i = next(numbers)
                if i >= n:
                    return
                sent, sent_at = time.perf_counter(), time.time() * 1000
                post(session, i)
                took = (time.perf_counter() - sent) * 1000
                with lock:
                    admit_ms.append(took)
                    spans.append((sent_at, time.time() * 1000))

    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        for future in [pool.submit(worker) for _ in range(CONCURRENCY)]:
            future.result()
    return admit_ms, spans, started, time.perf_counter()


def burst_figures(n: int, alarms: int, admit_ms: list[float], idle_p50_ms: float,
                  started: float, admitted: float, settled: float) -> dict[str, float]:
    """What a burst of ``n`` reports, the same for threadline and the Agents SDK: alarms,
    settlements per second (first POST to all settled), the POSTs' round trips against an
    idle one, and how long admitting and then settling took (``perf_counter`` times)."""
    return {
        "alarms": alarms,
        "alarms_per_submission": alarms / n,
        "settlements_per_s": n / (settled - started),
        "p50_ms": percentile(admit_ms, 0.5),
        "p99_ms": percentile(admit_ms, 0.99),
        "max_ms": max(admit_ms),
        "idle_p50_ms": idle_p50_ms,
        "admission_s": admitted - started,
        "settle_lag_s": settled - admitted,
    }


def idle_admissions(runtime: Runtime, obj: Bench, space: str, samples: int) -> float:
    """The p50 round trip of ``samples`` admissions, each into a quiet object (the previous
    one settled and no alarm set), so none overlaps a pass."""
    took: list[float] = []
    with _client(runtime) as client:
        for i in range(samples):
            sent = time.perf_counter()
            done = submit_echo(client, thread_path(space, "idle"), f"i{i}")
            took.append((time.perf_counter() - sent) * 1000)
            poll(lambda done=done: obj.status(done)["state"] == "settled" and obj.quiet(),
                 "an idle admission to settle")
    return percentile(took, 0.5)


def burst_run(runtime: Runtime, space: str, n: int, threads: int) -> dict[str, float]:
    """One burst into a fresh space; the run's figures."""
    obj = _warm(runtime, space)
    idle_p50 = idle_admissions(runtime, obj, space, idle_samples(n))
    since = int(obj.status()["alarms"])

    def post(client: httpx.Client, i: int) -> None:
        submit_echo(client, thread_path(space, f"t{i % threads}"), f"b{i}")

    admit_ms, spans, started, admitted = drive(n, post, lambda: _client(runtime))

    def all_settled() -> dict[str, Any] | None:
        progress = dict(obj.call("progress", since=since))
        return progress if progress["settled"] >= n else None

    progress = poll(all_settled, f"{n} submissions to settle", timeout=SETTLE_S)
    settled = time.perf_counter()
    # The pass reports' count must agree with the submissions themselves.
    quiet = poll(obj.quiet, "the object to be quiet", timeout=SETTLE_S)
    if quiet["open"] != 0 or progress["settled"] != n:
        raise ScenarioError(f"expected {n} settled and none open, got {progress} / {quiet}")
    return {
        **burst_figures(n, int(quiet["alarms"]) - since, admit_ms, idle_p50,
                        started, admitted, settled),
        "max_settled_per_pass": progress["max_settled"],
        **_gate(spans, obj.alarms_since(since)),
    }


def _gate(spans: list[tuple[float, float]], alarms: list[dict[str, Any]]) -> dict[str, float]:
    """How the passes weigh on admission: the passes' own durations, and the POST round trips
    that overlapped a pass against those that did not.

    A pass that awaits no real I/O keeps the object's input gate closed, so a POST arriving
    meanwhile waits for it. The passes' times are on the object's clock (it moves only
    across I/O, so a pass's ``wall_ms`` is a lower bound on its length) and the POSTs' on the
    driver's wall clock, the same host clock: the split is indicative, not exact.
    """
    passes = [(float(a["started_at"]), float(a["started_at"] + a["wall_ms"])) for a in alarms]
    during: list[float] = []
    outside: list[float] = []
    for sent, answered in spans:
        overlaps = any(start < answered and end > sent for start, end in passes)
        (during if overlaps else outside).append(answered - sent)
    walls = [float(a["wall_ms"]) for a in alarms]
    out = {"pass_ms_p50": percentile(walls, 0.5), "pass_ms_max": max(walls),
           "pass_busy_s": sum(walls) / 1000, "posts_during_pass": float(len(during))}
    if during:
        out["p50_ms_during_pass"] = percentile(during, 0.5)
    if outside:
        out["p50_ms_outside_pass"] = percentile(outside, 0.5)
    return out


def burst(runtime: Runtime, n: int, threads: int, runs: int) -> Measurement:
    """Scenario 3 in workerd: ``runs`` bursts, each into a fresh space."""
    m = Measurement("3", WORKERD, f"{n:,} over {threads} Threads, concurrency {CONCURRENCY}")
    for run in range(runs):
        m.runs.append(burst_run(runtime, f"burst-{n}-{run}", n, threads))
    return m


def turns_run(runtime: Runtime, space: str, n: int) -> dict[str, list[float]]:
    """``n`` sequential echo turns on one Thread of a fresh space; every sample of each figure."""
    _warm(runtime, space)
    base = thread_path(space, "turns")
    samples: dict[str, list[float]] = {figure: [] for figure, _ in TURN_CASES}
    with _client(runtime) as client:
        warm = submit_echo(client, base, "warm")
        with connect_sse(client, "GET", base + "/events") as source:
            events: Iterator[Any] = source.iter_sse()
            skip_to_record(events, warm)
            for index in range(n):
                submission_id, seen = timed_turn(client, base, events, f"m{index}")
                seen.update(object_clock(client, space, base, submission_id, passes=False))
                for figure in samples:
                    samples[figure].append(seen[figure])
    return samples


def turns(runtime: Runtime, n: int, runs: int) -> list[Measurement]:
    """Scenario 4 in workerd: p50/p99 of each figure per run (``runs`` fresh spaces)."""
    out = {figure: Measurement("4", WORKERD, case) for figure, case in TURN_CASES}
    for run in range(runs):
        samples = turns_run(runtime, f"turns-{n}-{run}", n)
        for figure, m in out.items():
            m.runs.append({
                "p50_ms": percentile(samples[figure], 0.5),
                "p99_ms": percentile(samples[figure], 0.99),
                "max_ms": max(samples[figure]),
                "turns": len(samples[figure]),
            })
    return list(out.values())
