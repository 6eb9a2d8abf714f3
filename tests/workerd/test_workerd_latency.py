"""Warm latency of the thread API in the local workerd runtime, printed, never asserted.

Run with ``-s`` to see the figures (``bash scripts/test tests/workerd/test_workerd_latency.py
-s -q``). Each sample is one ``echo`` submission over real HTTP through the Worker, run by the
object's alarm alone, while an event stream on the same Thread is open:

- admit: the POST's round trip (admission committed, alarm armed, prompt pass requested);
- summary: ``GET .../threads/{thread}``;
- admission -> the start of the alarm's pass that ran it (the object's own clock);
- admission -> Attempt start: the object's own clock, from the submission's ``created_at`` to
  its step's ``started_at`` (whole milliseconds), and, seen by the client, from sending the
  POST to the first event showing the submission running or further;
- admission -> first SSE event (the submission announced), and -> the run's first SSE record
  (the echo's reply, its only record), from sending the POST.

Two series: back to back (the next POST as soon as the previous run's record arrived) and
spaced (a pause first, so that the pass that ran the previous run has finished when the next
admission asks for a prompt pass).
"""

from __future__ import annotations

import time

import httpx
from echo_turns import (
    ADMIT,
    ATTEMPT_CLIENT,
    ATTEMPT_OBJECT,
    FIRST_EVENT,
    FIRST_RECORD,
    PASS_OBJECT,
    object_clock,
    percentile,
    skip_to_record,
    submit_echo,
    thread_path,
    timed_turn,
)
from httpx_sse import connect_sse
from workerd_runtime import TOKEN, Runtime

SAMPLES = 40
SPACE = "latency"


def _percentiles(samples: list[float]) -> str:
    return (f"p50 {percentile(samples, 0.5):6.1f} p99 {percentile(samples, 0.99):6.1f}"
            f" max {max(samples):6.1f}")


def _series(client: httpx.Client, thread: str, pause_s: float) -> dict[str, list[float]]:
    base = thread_path(SPACE, thread)
    figures: dict[str, list[float]] = {key: [] for key in (
        ADMIT, "summary", PASS_OBJECT, ATTEMPT_OBJECT, ATTEMPT_CLIENT, FIRST_EVENT, FIRST_RECORD)}
    warm = submit_echo(client, base, "w")
    with connect_sse(client, "GET", base + "/events") as source:
        events = source.iter_sse()
        skip_to_record(events, warm)
        for index in range(SAMPLES):
            time.sleep(pause_s)
            sub_id, seen = timed_turn(client, base, events, f"m{index}")
            seen.update(object_clock(client, SPACE, base, sub_id))
            for key, value in seen.items():
                figures[key].append(value)
            summary_started = time.perf_counter()
            assert client.get(base).status_code == 200
            figures["summary"].append((time.perf_counter() - summary_started) * 1000)
    return figures


def test_print_warm_latency(workerd: Runtime) -> None:
    headers = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=workerd.url, headers=headers, timeout=30.0) as client:
        series = {
            "back to back": _series(client, "b2b", 0.0),
            "spaced 100 ms": _series(client, "spaced", 0.1),
        }
    lines = [f"warm latency in workerd, ms ({SAMPLES} echo runs per series):"]
    for name, figures in series.items():
        lines.append(f"  {name}:")
        for key, samples in figures.items():
            lines.append(f"    {key:32} {_percentiles(samples)} (n={len(samples)})")
    print("\n".join(lines))
    assert all(len(samples) == SAMPLES for figures in series.values()
               for samples in figures.values())
