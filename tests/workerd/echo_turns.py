"""Timing ``echo`` turns over the HTTP API (the workerd latency test and ``scripts/bench``).

One turn: POST an ``echo`` submission, then read the Thread's open event stream until the
run's record (the echo's reply) arrives, then on to its ``submission.settled`` record (not
timed), so the next turn's reading starts with nothing of this one left on the stream.
Client-side figures are taken on the driver's monotonic clock from the moment before the POST
is sent:

- ``admit``: the POST's round trip (admission committed, alarm armed, prompt pass requested);
- ``first SSE event``: the first event of any kind after the POST (the submission announced);
- ``attempt start (client)``: the first event showing the submission past ``queued``/``ready``
  (or its record, if that comes first): an upper bound on the Attempt's start, since it
  includes the stream's delivery;
- ``first SSE record``: the run's record on the stream.

:func:`object_clock` reads the same turn as the object saw it: from the submission's
``created_at`` (set by the admission) to its journal step's ``started_at`` (set when the
Attempt ran the step), both whole milliseconds on the object's clock. Inside workerd that clock
only moves across I/O, so both timestamps can lag the true moment: read them as the object's
own view, not a stopwatch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
from httpx_sse import ServerSentEvent

ADMIT = "admit"
FIRST_EVENT = "first SSE event"
ATTEMPT_CLIENT = "attempt start (client)"
FIRST_RECORD = "first SSE record"
ATTEMPT_OBJECT = "attempt start (object clock)"
PASS_OBJECT = "alarm pass start (object clock)"
#: The kind of a submission's last record, its settlement.
SETTLED = "submission.settled"
#: States a submission has before its Attempt starts.
_NOT_STARTED = frozenset({"queued", "ready"})


def percentile(samples: list[float], fraction: float) -> float:
    """The sample at ``fraction`` of the sorted samples (nearest rank, no interpolation)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def thread_path(space: str, thread: str) -> str:
    """The API path of one Thread."""
    return f"/v1/spaces/{space}/threads/{thread}"


def submit_echo(client: httpx.Client, base: str, text: str) -> str:
    """POST one ``echo`` submission; its id."""
    reply = client.post(base + "/submissions", json={"agent": "echo", "input": {"text": text}})
    if reply.status_code != 202:
        raise RuntimeError(f"submission refused: HTTP {reply.status_code}: {reply.text[:300]}")
    return str(reply.json()["id"])


def skip_to_record(events: Iterator[ServerSentEvent], submission_id: str) -> None:
    """Read the stream up to the settlement record of ``submission_id`` (a warm-up's, say):
    its last record."""
    for event in events:
        data: Any = json.loads(event.data)
        if (event.event == "record" and data["submission_id"] == submission_id
                and data["kind"] == SETTLED):
            return
    raise RuntimeError("the event stream ended")


def timed_turn(
    client: httpx.Client, base: str, events: Iterator[ServerSentEvent], text: str
) -> tuple[str, dict[str, float]]:
    """Run one echo turn on an open stream; its submission id and client-side figures (ms)."""
    started = time.perf_counter()
    submission_id = submit_echo(client, base, text)
    seen: dict[str, float] = {ADMIT: (time.perf_counter() - started) * 1000}
    for event in events:
        at = (time.perf_counter() - started) * 1000
        data: Any = json.loads(event.data)
        seen.setdefault(FIRST_EVENT, at)
        if (event.event == "submission" and data["id"] == submission_id
                and data["state"] not in _NOT_STARTED):
            seen.setdefault(ATTEMPT_CLIENT, at)
        if event.event == "record" and data["submission_id"] == submission_id:
            # The echo's reply, its first record: its Attempt started before it.
            seen.setdefault(ATTEMPT_CLIENT, at)
            seen[FIRST_RECORD] = at
            skip_to_record(events, submission_id)
            return submission_id, seen
    raise RuntimeError("the event stream ended before the run's record")


def object_clock(
    client: httpx.Client, space: str, base: str, submission_id: str, *, passes: bool = True
) -> dict[str, float]:
    """The turn on the object's clock (ms): admission to Attempt start, and (with ``passes``)
    admission to the start of the pass that ran it: the last pass started by the Attempt's
    start. A pass pauses for waiting requests between Attempts and runs what they admit, so
    that pass may have started before the admission (then 0)."""
    detail = client.get(f"{base}/submissions/{submission_id}").json()
    step = detail["journal"]["entries"][0]
    out = {ATTEMPT_OBJECT: float(step["started_at"] - detail["created_at"])}
    if passes:
        reports = client.get(f"/v1/spaces/{space}/maintenance").json()["pass_reports"]
        started = [r["started_at"] for r in reports if r["started_at"] <= step["started_at"]]
        ran_by = max(started) if started else step["started_at"]
        out[PASS_OBJECT] = float(max(0, ran_by - detail["created_at"]))
    return out
