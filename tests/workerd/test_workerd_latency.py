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

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, connect_sse
from workerd_runtime import TOKEN, Runtime

SAMPLES = 40
SPACE = "latency"


def _percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {p50:6.1f} p99 {p99:6.1f} max {ordered[-1]:6.1f}"


def _series(client: httpx.Client, thread: str, pause_s: float) -> dict[str, list[float]]:
    base = f"/v1/spaces/{SPACE}/threads/{thread}"
    figures: dict[str, list[float]] = {key: [] for key in (
        "admit", "summary", "alarm pass start (object clock)", "attempt start (object clock)",
        "attempt start (client)", "first SSE event", "first SSE record")}
    warm = client.post(base + "/submissions", json={"agent": "echo", "input": {"text": "w"}})
    assert warm.status_code == 202
    with connect_sse(client, "GET", base + "/events") as source:
        events: Iterator[ServerSentEvent] = source.iter_sse()
        for event in events:  # the warm-up run's record
            if event.event == "record":
                break
        for index in range(SAMPLES):
            time.sleep(pause_s)
            started = time.perf_counter()
            reply = client.post(base + "/submissions",
                                json={"agent": "echo", "input": {"text": f"m{index}"}})
            admitted = time.perf_counter()
            assert reply.status_code == 202, reply.text
            sub_id = reply.json()["id"]
            seen: dict[str, float] = {}
            for event in events:
                at = (time.perf_counter() - started) * 1000
                data: Any = json.loads(event.data)
                seen.setdefault("first SSE event", at)
                if event.event == "submission" and data["id"] == sub_id and data["state"] not in (
                        "queued", "ready"):
                    seen.setdefault("attempt start (client)", at)
                if event.event == "record" and data["submission_id"] == sub_id:
                    # The echo's reply, the run's only record: its Attempt started before it.
                    seen.setdefault("attempt start (client)", at)
                    seen["first SSE record"] = at
                    break
            figures["admit"].append((admitted - started) * 1000)
            for key, value in seen.items():
                figures[key].append(value)
            detail = client.get(f"{base}/submissions/{sub_id}").json()
            step = detail["journal"]["entries"][0]
            figures["attempt start (object clock)"].append(
                float(step["started_at"] - detail["created_at"]))
            # The pass that ran it: the first one to start at or after the admission.
            reports = client.get(f"/v1/spaces/{SPACE}/maintenance").json()["pass_reports"]
            first_pass = min(r["started_at"] for r in reports
                             if r["started_at"] >= detail["created_at"])
            figures["alarm pass start (object clock)"].append(
                float(first_pass - detail["created_at"]))
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
