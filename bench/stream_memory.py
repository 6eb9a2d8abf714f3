"""``python -m bench.stream_memory``: memory per open event stream in the local workerd runtime.

What ``RuntimeConfig.max_event_streams`` is chosen from. Serves the workerd test bundle (``src/``
plus ``tests/workerd/probe``) and reads the workerd process's resident memory (``VmRSS`` of
``/proc/<pid>/status``) with 0, 100, 200 and 400 streams open on one Thread, each run on a
fresh runtime (memory freed by one run would otherwise be reused by the next):

1. ``object``: event streams of one Thread of a ``mem-*`` space, each a client connection
   through the Worker to the probe's ``MeasuredThreadObject`` (the deployed object class with
   the default configuration, but caps above what is measured). The clients read nothing; the
   kernel's socket buffers take what is sent, so the platform keeps pulling and the stall bound
   never closes a stream. The Thread holds one settled submission, so each stream has sent its
   backlog and waits for news, like a live client's.
2. ``worker``: as many client connections to ``/_streams/idle``, an endless stream the Worker
   serves by itself: the Worker's share of a stream (connection, request, pipe).
3. ``fan-out``: on a fresh runtime each, 0, 100 and 400 streams open, then a few submissions
   one after another, each one's records going to every stream: RSS and the object's heap after
   each, and how long each admission and settlement took as the client saw them.

MB per idle stream is the least-squares slope of RSS on the count; the object's share is the
first slope minus the second. The object also reports its Python heap (Pyodide's wasm memory, which
only grows) at each count. Worker and object share one workerd process here, and one isolate.

Usage: scripts/bench-streams [--counts 0,100,200,400] [--fan-out 0,100,400] [--submissions 5]
                             [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "workerd"))

from workerd_runtime import TOKEN, Runtime  # noqa: E402

BUNDLE = ROOT / ".threadline" / "bundle-test"
PROBE = ROOT / "tests" / "workerd" / "probe"
#: The probe bundle's objects, as tests/workerd/conftest.py builds it (the same bundle).
OBJECTS = ("PROBE=StorageProbe", "PROBE_THREADS=ProbeThreadObject",
           "SCHEDULED_THREADS=ScheduledThreadObject", "SUBSCRIBED_THREADS=SubscribedThreadObject",
           "CAPPED_THREADS=CappedThreadObject", "MEASURED_THREADS=MeasuredThreadObject")
SPACE = "mem-bench"
THREAD = "t1"
#: The platform's memory limit per isolate (a Durable Object's included).
PLATFORM_MB = 128
#: Samples of RSS per count, after it settled, and the pause between them.
SAMPLES = 5
SAMPLE_PAUSE_S = 0.5
SETTLE_S = 2.0
WAIT_S = 60.0
#: Submissions run with every stream open, whose records fan out to all of them.
FAN_OUT = 5


def _progress(message: str) -> None:
    print(f"[streams] {message}", file=sys.stderr, flush=True)


def build() -> None:
    command = [sys.executable, str(ROOT / "scripts" / "workerd" / "build.py"), "--out",
               str(BUNDLE), "--overlay", str(PROBE), "--main", "probe_entry"]
    for item in OBJECTS:
        command += ["--durable-object", item]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)  # noqa: S603


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the fields follow the last ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def workerd_pid(runtime: Runtime) -> int:
    """The workerd process under the runtime's node process (miniflare starts it)."""
    assert runtime.process is not None
    todo = [runtime.process.pid]
    while todo:
        pid = todo.pop()
        try:
            name = (Path("/proc") / str(pid) / "comm").read_text().strip()
        except OSError:
            continue
        if name == "workerd":
            return pid
        todo += _children(pid)
    raise RuntimeError("no workerd process under the runtime")


def rss_mb(pid: int) -> float:
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def settled_rss(pid: int) -> float:
    time.sleep(SETTLE_S)
    samples = []
    for _ in range(SAMPLES):
        samples.append(rss_mb(pid))
        time.sleep(SAMPLE_PAUSE_S)
    return statistics.median(samples)


def poll(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def open_stream(runtime: Runtime, path: str) -> socket.socket:
    """A client connection with the stream's response headers read, its body left unread."""
    url = urlsplit(runtime.url)
    conn = socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=30)
    conn.sendall((f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                  f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk:
            raise RuntimeError(f"connection closed before the headers of {path}")
        head += chunk
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status:
        raise RuntimeError(f"{path}: {status.decode()}")
    return conn


def counts(runtime: Runtime) -> dict[str, Any]:
    reply = runtime.request(f"/_streams/{SPACE}/count")
    assert reply.status == 200, reply.body
    found: dict[str, Any] = reply.json()
    return found


@contextmanager
def fresh_runtime() -> Iterator[Runtime]:
    with tempfile.TemporaryDirectory(prefix="threadline-streams-") as state:
        runtime = Runtime(BUNDLE, Path(state), {})
        runtime.start()
        try:
            runtime.warm()
            yield runtime
        finally:
            runtime.stop()


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares slope and intercept of ``points`` (a flat line through one point)."""
    if len({n for n, _ in points}) < 2:
        return 0.0, points[0][1] if points else 0.0
    slope, intercept = statistics.linear_regression([float(n) for n, _ in points],
                                                    [mb for _, mb in points])
    return slope, intercept


def seed(runtime: Runtime) -> None:
    """One settled submission on the measured Thread: each stream has a backlog to send."""
    run_one(runtime, 0)


def run_one(runtime: Runtime, n: int) -> tuple[float, float]:
    """Submit to the measured Thread and wait until it settled: (admission, settlement) in ms
    as the client sees them."""
    thread = f"/v1/spaces/{SPACE}/threads/{THREAD}"
    started = time.monotonic()
    reply = runtime.request(thread + "/submissions", method="POST", token=TOKEN,
                            body=json.dumps({"agent": "echo", "input": {"n": n}}).encode())
    assert reply.status == 202, reply.body
    admitted = (time.monotonic() - started) * 1000
    poll(lambda: not runtime.request(thread, token=TOKEN).json()["open"],
         "the submission to settle")
    return admitted, (time.monotonic() - started) * 1000


def heap_mb(runtime: Runtime) -> float | None:
    heap = counts(runtime)["wasm_bytes"]
    return None if heap is None else round(heap / 2**20, 1)


def open_many(runtime: Runtime, held: list[socket.socket], path: str, target: int,
              in_object: bool) -> None:
    while len(held) < target:
        held.append(open_stream(runtime, path))
    if in_object:
        poll(lambda: counts(runtime)["streams"] == target, f"{target} open streams in the object")


def measure(kind: str, steps: list[int]) -> dict[str, Any]:
    """RSS (and, for the object, its reported heap) at each count of idle open streams."""
    with fresh_runtime() as runtime:
        pid = workerd_pid(runtime)
        warm_mb = settled_rss(pid)
        path = "/_streams/idle"
        if kind == "object":
            path = f"/v1/spaces/{SPACE}/threads/{THREAD}/events"
            seed(runtime)
        held: list[socket.socket] = []
        rows = []
        try:
            for target in steps:
                open_many(runtime, held, path, target, kind == "object")
                mb = settled_rss(pid)
                row: dict[str, Any] = {"streams": target, "rss_mb": round(mb, 1)}
                if kind == "object":
                    row["heap_mb"] = heap_mb(runtime)
                rows.append(row)
                _progress(f"{kind}: {target} streams open, workerd RSS {mb:.1f} MB")
        finally:
            for conn in held:
                conn.close()
        return {"warm_mb": round(warm_mb, 1), "rows": rows}


def fan_out(streams: int, submissions: int = FAN_OUT) -> dict[str, Any]:
    """On a fresh runtime, ``streams`` streams open (their clients reading nothing), then
    ``submissions`` submissions one after another, each one's records going to every stream:
    RSS and heap before and after each, and each one's admission and settlement times."""
    with fresh_runtime() as runtime:
        pid = workerd_pid(runtime)
        seed(runtime)
        held: list[socket.socket] = []
        try:
            open_many(runtime, held, f"/v1/spaces/{SPACE}/threads/{THREAD}/events", streams,
                      True)
            idle = settled_rss(pid)
            after, heaps, admitted, settled = [], [], [], []
            for n in range(submissions):
                took = run_one(runtime, n + 1)
                admitted.append(round(took[0]))
                settled.append(round(took[1]))
                after.append(round(settled_rss(pid), 1))
                heaps.append(heap_mb(runtime))
            _progress(f"fan-out to {streams} streams: idle {idle:.1f} MB, after each"
                      f" submission {after} MB RSS, heap {heaps} MB")
        finally:
            for conn in held:
                conn.close()
    return {"streams": streams, "idle_rss_mb": round(idle, 1), "rss_mb_after": after,
            "heap_mb_after": heaps, "admission_ms": admitted, "settled_ms": settled}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-streams", description=__doc__)
    parser.add_argument("--counts", default="0,100,200,400",
                        help="open idle streams at which memory is read")
    parser.add_argument("--fan-out", default="0,100,400",
                        help="open streams of each fan-out run (empty: none)")
    parser.add_argument("--submissions", type=int, default=FAN_OUT,
                        help="submissions of each fan-out run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    steps = sorted({int(part) for part in args.counts.split(",")})
    fan_outs = sorted({int(part) for part in args.fan_out.split(",") if part})
    _progress("building the probe bundle ...")
    build()
    results: dict[str, Any] = {kind: measure(kind, steps) for kind in ("object", "worker")}
    results["fan_out"] = [fan_out(n, args.submissions) for n in fan_outs]
    obj = [(row["streams"], row["rss_mb"]) for row in results["object"]["rows"]]
    worker = [(row["streams"], row["rss_mb"]) for row in results["worker"]["rows"]]
    through, base = fit(obj)
    alone, worker_base = fit(worker)
    share = through - alone
    results["fit"] = {
        "mb_per_stream_through_worker": round(through, 4),
        "mb_per_stream_worker_alone": round(alone, 4),
        "mb_per_stream_object": round(share, 4),
        "baseline_rss_mb": round(base, 1),
    }

    print("Idle streams (each has sent its backlog and waits):")
    print(f"{'streams':>8} {'RSS, object run':>16} {'heap, object':>13} {'RSS, Worker only':>17}")
    for (n, mb), row, (_, alone_mb) in zip(obj, results["object"]["rows"], worker, strict=True):
        heap = row.get("heap_mb")
        heap_text = "-" if heap is None else f"{heap:.1f} MB"
        print(f"{n:>8} {mb:>13.1f} MB {heap_text:>13} {alone_mb:>14.1f} MB")
    print(f"warm runtime before the object existed: {results['object']['warm_mb']:.1f} MB RSS;"
          f" fit at 0 streams: {base:.1f} MB (Worker-only run: {worker_base:.1f} MB)")
    print(f"per idle stream through the Worker: {through * 1024:.0f} KB; the Worker alone:"
          f" {alone * 1024:.0f} KB; the object's share: {share * 1024:.0f} KB")
    if results["fan_out"]:
        print()
        print(f"Fan-out: {args.submissions} submissions one after another,"
              " records to every stream:")
        print(f"{'streams':>8} {'idle RSS':>10} {'RSS after each submission':>40}"
              f" {'heap after':>11} {'admission ms':>22} {'settled ms':>26}")
        for run in results["fan_out"]:
            after = " ".join(f"{mb:.0f}" for mb in run["rss_mb_after"])
            print(f"{run['streams']:>8} {run['idle_rss_mb']:>7.1f} MB {after:>40}"
                  f" {run['heap_mb_after'][-1]!s:>8} MB"
                  f" {' '.join(map(str, run['admission_ms'])):>22}"
                  f" {' '.join(map(str, run['settled_ms'])):>26}")
        quiet = results["fan_out"][0]
        for run in results["fan_out"][1:]:
            grown = max(run["rss_mb_after"]) - run["idle_rss_mb"]
            base_grown = max(quiet["rss_mb_after"]) - quiet["idle_rss_mb"]
            per = (grown - base_grown) / max(run["streams"] - quiet["streams"], 1)
            print(f"{run['streams']} streams: RSS grew {grown:.0f} MB during the fan-out"
                  f" ({base_grown:.0f} MB with {quiet['streams']}): {per * 1024:.0f} KB per"
                  " stream")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
