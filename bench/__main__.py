"""``python -m bench``: run the benchmark scenarios (``scripts/bench`` bootstraps and calls it).

Prints one progress line per scenario and system on stderr, then one table on stdout; writes
``bench/results.json`` and draws ``docs/bench.png`` (or where ``--out``/``--chart`` say).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The agents the scenarios run live beside the workerd overlay, so both runtimes share them.
sys.path.insert(0, str(ROOT / "bench" / "workerd"))

from bench import llm_turns, report, sim  # noqa: E402
from bench.model import Measurement  # noqa: E402

#: ``burst``: (submissions, Threads) of scenario 3; ``turns``: sequential turns of scenario 4;
#: ``schedules``: schedules declared in scenario 8 (the workerd objects have these two).
#: ``llm``: scenario 10's turns (Threads at once, tokens per answer, the provider's latency).
FULL: dict[str, Any] = {"settled": [0, 1_000, 10_000], "k": [10, 1_000, 10_000],
                        "burst": (1_000, 50), "turns": 200, "schedules": [1, 100], "runs": 5,
                        "llm": {"threads": 50, "tokens": 200, "first_token_ms": 1_000,
                                "total_ms": 2_000}}
QUICK: dict[str, Any] = {"settled": [0, 100], "k": [10, 100], "burst": (50, 5), "turns": 20,
                         "schedules": [1, 100], "runs": 1,
                         "llm": {"threads": 10, "tokens": 200, "first_token_ms": 1_000,
                                 "total_ms": 2_000}}
SYSTEMS = ("sim", "workerd", "agents")
SCENARIO_IDS = [str(n) for n in range(1, 11)]
#: The scenarios each system measures: one none of whose scenarios is selected is not started.
SCENARIOS_OF = {"sim": {*"125789", "10"}, "workerd": {*"12345789", "10"},
                "agents": {"3", "6", "10"}}


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


class Runner:
    """Runs steps, printing a progress line for each and collecting failures."""

    def __init__(self, scenarios: list[str] | None = None) -> None:
        self.measurements: list[Measurement] = []
        self.failures: list[str] = []
        #: Only the steps of these scenarios run (None: all); set-up steps always run.
        self.scenarios = scenarios

    def step(self, label: str, fn: Callable[[], Any]) -> None:
        scenario = label.split(" ", 1)[0].rstrip("ab")
        if self.scenarios is not None and scenario.isdigit() and scenario not in self.scenarios:
            return
        _progress(f"{label} ...")
        started = time.monotonic()
        try:
            result = fn()
        except Exception as exc:
            self.failures.append(f"{label}: {type(exc).__name__}: {exc}")
            _progress(f"{label}: FAILED ({type(exc).__name__}: {exc})")
            traceback.print_exc(file=sys.stderr)
            return
        found = result if isinstance(result, list) else [result]
        self.measurements += found
        _progress(f"{label}: done in {time.monotonic() - started:.1f} s")


def _measurements(path: Path) -> list[Measurement]:
    """The measurements an earlier run wrote to ``path``."""
    return [Measurement.from_dict(m) for m in json.loads(path.read_text())["measurements"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small K and bursts, one run")
    parser.add_argument("--explain", action="store_true",
                        help="print the rows per statement of scenarios 1, 2 and 5")
    parser.add_argument("--runs", type=int, help="runs per figure (default 5, quick 1)")
    parser.add_argument("--only", action="append", choices=SYSTEMS,
                        help="run only these systems (repeatable)")
    parser.add_argument("--scenario", action="append", choices=SCENARIO_IDS,
                        help="run only these scenarios (repeatable; results then go under "
                             ".threadline/bench-partial/ unless --out/--chart say)")
    parser.add_argument("--out", type=Path, help="results file (default bench/results.json)")
    parser.add_argument("--chart", type=Path, help="chart file (default docs/bench.png)")
    parser.add_argument("--table-from", type=Path, metavar="RESULTS",
                        help="print the table of an earlier results.json and exit")
    parser.add_argument("--before", type=Path, metavar="RESULTS",
                        help="also print the under-load figures of an earlier results.json "
                             "(the code before a change, say) beside this run's")
    args = parser.parse_args(argv)
    before = None if args.before is None else _measurements(args.before)
    if args.table_from:
        earlier = _measurements(args.table_from)
        print(report.table(earlier))
        if before is not None:
            print("\n".join(report.before_after(before, earlier)))
        if args.explain:
            print()
            print(report.explain(earlier))
        return 0

    plan: dict[str, Any] = dict(QUICK if args.quick else FULL)
    runs = args.runs or int(plan["runs"])
    systems = [system for system in args.only or SYSTEMS
               if args.scenario is None or SCENARIOS_OF[system] & set(args.scenario)]
    # A quick or partial run never replaces the committed full results.
    default_dir = (ROOT / ".threadline" / "bench-quick" if args.quick else
                   ROOT / ".threadline" / "bench-partial" if args.scenario else None)
    out = args.out or (default_dir / "results.json" if default_dir else
                       ROOT / "bench" / "results.json")
    chart = args.chart or (default_dir / "bench.png" if default_dir else
                           ROOT / "docs" / "bench.png")

    runner = Runner(args.scenario)
    if "sim" in systems:
        for n in plan["settled"]:
            runner.step(f"1 caught-up pass, {n:,} settled [sqlite3]",
                        lambda n=n: sim.run_sync(lambda: sim.caught_up(n, runs, args.explain)))
        runner.step("2 one submission [sqlite3]",
                    lambda: sim.run_sync(lambda: sim.one_submission(runs, args.explain)))
        for k in plan["k"]:
            runner.step(f"5 K={k:,} pending timers [sqlite3]",
                        lambda k=k: sim.run_sync(lambda: sim.pending_timers(k, runs,
                                                                            args.explain)))
        for k in plan["k"]:
            runner.step(f"7 K={k:,} pending delayed submissions [sqlite3]",
                        lambda k=k: sim.run_sync(lambda: sim.pending_delayed(
                            k, runs, args.explain, whole=k == plan["k"][0])))
        for submit in (False, True):
            for n in plan["schedules"]:
                runner.step(
                    f"8 N={n:,} schedules, one fire submitting {'one' if submit else 'nothing'}"
                    " [sqlite3]",
                    lambda n=n, submit=submit: sim.run_sync(
                        lambda: sim.schedule_fires(n, submit, runs, args.explain)))
        runner.step("9 rows written per delivered batch, per subscriber [sqlite3]",
                    lambda: sim.run_sync(lambda: sim.subscriber_batches(runs, args.explain)))
        llm = plan["llm"]
        runner.step(f"10 {llm['threads']} chat turns at once, simulated time [sqlite3]",
                    lambda: llm_turns.measurements(llm))
    if "workerd" in systems or "agents" in systems:
        from bench import live

        live.run(runner, systems, plan, runs, args.explain)

    measurements = runner.measurements
    print(report.table(measurements))
    if before is not None:
        print("\n".join(report.before_after(before, measurements)))
    if args.explain:
        print()
        print(report.explain(measurements))
    meta = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "runs": runs,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "failures": runner.failures,
    }
    report.write_json(out, measurements, meta)
    _progress(f"wrote {out}")
    try:
        report.draw(chart, measurements)
        _progress(f"drew {chart}")
    except Exception as exc:
        runner.failures.append(f"chart: {type(exc).__name__}: {exc}")
    if runner.failures:
        print("\nFAILED:", file=sys.stderr)
        for failure in runner.failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
