"""Where a busy pass's time goes in workerd: ``python -m bench.profile_pass [--n N]``.

Inside workerd the clock stands still while Python runs, so a pass cannot time its own
statements. Instead:

1. Counts per settlement, exact: ``N`` ``unit`` submissions (one Thread each) are seeded into
   a fresh bench object and run by its alarms; the statements each alarm ran (by kind, with
   the ``SELECT changes()`` reads charged on their own lines), its transactions, and the
   wall time from the seed to the object being quiet, as the driver sees it.
2. Unit costs, timed from outside: the bench object repeats one piece (a statement through
   the adapter, the raw JS call alone, a ``changes()`` read, an empty transaction, a JSON
   round trip of a record...) ``REPS`` times in one request; the round trip minus that of
   zero repetitions, over ``REPS``, is its cost. The best of three, as the machine is shared.

Prints a table: count per settlement x unit cost = milliseconds per settlement, beside the
measured milliseconds per settlement (the rest is Python: the pass, the ledger, the agent).
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.live import Bench, Runtime, build_bundle, poll

REPS = 2_000
UNITS = ["raw_exec", "exec_select", "exec_row10", "exec_write", "changes", "transaction",
         "json_roundtrip", "clock_now", "asyncio_hop", "task_spawn", "wait_first",
         "pause"]


def _kind(sql: str) -> str:
    if sql.startswith("SELECT changes()"):
        return "changes"
    verb = re.split(r"\s+", sql.strip(), maxsplit=1)[0].upper()
    return "select" if verb in ("SELECT", "WITH") else "write"


def unit_costs(runtime: Runtime, obj: Bench) -> dict[str, float]:
    """Microseconds per repetition of each unit (best of three)."""
    def timed(what: str, n: int) -> float:
        started = time.perf_counter()
        obj.call("unit-cost", what=what, n=n)
        return time.perf_counter() - started

    out: dict[str, float] = {}
    for what in UNITS:
        best = min(timed(what, REPS) - timed(what, 0) for _ in range(3))
        out[what] = max(best, 0.0) / REPS * 1e6
    return out


def busy_pass(runtime: Runtime, n: int) -> dict[str, Any]:
    """Seed ``n`` unit submissions, let the alarms run them; counts per settlement."""
    obj = Bench(runtime, f"profile-{n}-{time.time_ns()}")
    poll(obj.quiet, "the object to be quiet")
    warm = obj.call("admit", thread="warm-up", agent="unit", input="{}")["id"]
    poll(lambda: obj.status(warm)["state"] == "settled" and obj.quiet(), "the warm-up")
    since = obj.status()["alarms"]
    started = time.perf_counter()
    obj.call("seed", n=n, agent="unit", input='{"n": 1}', prefix="busy")
    poll(lambda: obj.call("progress", since=since)["settled"] >= n, "the seeded work")
    took = time.perf_counter() - started
    poll(obj.quiet, "the object to be quiet")
    alarms = obj.alarms_since(since)
    kinds: Counter[str] = Counter()
    for alarm in alarms:
        for entry in alarm["by_statement"]:
            kinds[_kind(entry["sql"])] += entry["count"]
    settled = sum(a["settled"] or 0 for a in alarms)
    return {"settled": settled, "alarms": len(alarms), "wall_s": took,
            "statements": sum(kinds.values()), "kinds": dict(kinds),
            "transactions": sum(a.get("transactions", 0) for a in alarms),
            # Read on demand since the adapter reads changed-row counts lazily; before, each
            # write's read was charged on a statement line of its own.
            "changes_read": sum(a.get("changes_read", 0) for a in alarms)
            or kinds.get("changes", 0),
            "rows_read": sum(a["rows_read"] for a in alarms),
            "rows_written": sum(a["rows_written"] for a in alarms), "obj": obj}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_pass")
    parser.add_argument("--n", type=int, default=300, help="submissions in the busy pass")
    args = parser.parse_args()
    bundle = build_bundle()
    with tempfile.TemporaryDirectory(prefix="threadline-profile-") as state:
        runtime = Runtime(bundle, Path(state), {})
        runtime.start()
        try:
            runtime.warm()
            busy = busy_pass(runtime, args.n)
            costs = unit_costs(runtime, busy["obj"])
        finally:
            runtime.stop()
    per = busy["settled"] or 1
    ms_per = busy["wall_s"] * 1000 / per
    kinds = busy["kinds"]
    row_cost = costs["exec_row10"] - costs["exec_select"]
    lines = [
        f"busy pass: {busy['settled']} settled in {busy['alarms']} alarm(s), "
        f"{busy['wall_s']:.2f} s seed -> all settled: {ms_per:.2f} ms per settlement",
        f"rows read {busy['rows_read'] / per:.1f}, rows written {busy['rows_written'] / per:.1f}"
        f" per settlement",
        "",
        "| piece | per settlement | unit cost (us) | ms per settlement | share |",
        "|---|---:|---:|---:|---:|",
    ]
    pieces = [
        ("SELECT through the adapter (exec + rows)", kinds.get("select", 0) / per,
         costs["exec_select"]),
        ("INSERT/UPDATE/DELETE through the adapter (changes() excluded)",
         kinds.get("write", 0) / per, costs["exec_write"] - costs["changes"]
         if kinds.get("changes") else costs["exec_write"]),
        ("SELECT changes() read back", busy["changes_read"] / per, costs["changes"]),
        ("transactionSync (empty body)", busy["transactions"] / per, costs["transaction"]),
    ]
    accounted = 0.0
    for label, count, unit in pieces:
        ms = count * unit / 1000
        accounted += ms
        lines.append(f"| {label} | {count:.1f} | {unit:.0f} | {ms:.2f} | {ms / ms_per:.0%} |")
    rest = ms_per - accounted
    lines.append(f"| the rest: Python (pass, ledger, agent, JSON, pauses) | | | {rest:.2f} |"
                 f" {rest / ms_per:.0%} |")
    lines += [
        "",
        "Unit costs (us per repetition, best of three, "
        f"{REPS} repetitions in one request):",
        *(f"  {what}: {value:.1f}" for what, value in costs.items()),
        f"  (a 10-column row's materialisation beyond a 1-column one: {row_cost:.1f})",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
