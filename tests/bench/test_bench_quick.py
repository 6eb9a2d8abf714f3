"""``scripts/bench --quick`` runs in the suite, so the benchmark cannot rot.

It asserts that every scenario ran and produced its figures on every system, never what the
figures are (they are measurements, not tests).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_quick_runs_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    chart = tmp_path / "bench.png"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "bench"), "--quick", "--explain",
         "--out", str(out), "--chart", str(chart)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    results = json.loads(out.read_text())
    assert results["failures"] == []
    seen = {(m["scenario"], m["system"], m["case"]) for m in results["measurements"]}
    for system in ("threadline (sqlite3 approximation)", "threadline (workerd)"):
        for scenario, case in [("1", "settled=0"), ("2", "end to end"), ("5", "K=10"),
                               ("7", "K=10"), ("7", "end to end"),
                               ("8", "N=1: fire, nothing submitted"),
                               ("8", "N=100: fire submitting one"),
                               ("8", "N=100: that submission's run")]:
            assert (scenario, system, case) in seen, (scenario, system, case)
    for case in ("schedule() K=10", "queue() end to end"):
        assert ("6", "agents sdk (workerd)", case) in seen
    workerd = "threadline (workerd)"
    burst = [m for m in results["measurements"] if (m["scenario"], m["system"]) == ("3", workerd)]
    assert len(burst) == 1
    for figure in ("alarms_per_submission", "settlements_per_s", "p50_ms", "p99_ms"):
        assert burst[0]["figures"][figure]["median"] > 0, figure
    turns = {m["case"]: m for m in results["measurements"] if m["scenario"] == "4"}
    for case in ("admission -> Attempt start (object clock)", "admission -> first SSE record"):
        assert turns[case]["system"] == workerd
        assert turns[case]["figures"]["p50_ms"]["median"] >= 0, case
    for m in results["measurements"]:
        assert m["runs"] >= 1
        if m["scenario"] not in ("3", "4", "10"):
            assert "rows_read" in m["figures"] and "rows_written" in m["figures"]
    llm = {(m["system"], m["case"]): m["figures"] for m in results["measurements"]
           if m["scenario"] == "10"}
    for system in ("threadline (sqlite3 approximation)", "threadline (workerd)"):
        assert llm[(system, "one turn alone (turn.stream)")]["settled_s"]["median"] > 0
        many = llm[(system, "10 Threads at once (turn.stream)")]
        for figure in ("settled_s", "ratio_to_alone", "p50_ms", "p99_ms", "rows_written"):
            assert many[figure]["median"] > 0, (system, figure)
        assert llm[(system, "10 Threads at once (one emit per token)")]["rows_written"][
            "median"] > 0
    chat = llm[("agents sdk (workerd)", "AIChatAgent: one message alone")]
    for figure in ("settled_s", "p50_ms", "rows_written"):
        assert chat[figure]["median"] > 0, figure
    assert llm[("agents sdk (workerd)", "AIChatAgent: 10 conversations at once (10 agents)")][
        "settled_s"]["median"] > 0
    assert "Side by side, scenario 10" in done.stdout
    assert {r["what"] for r in results["side_by_side"]} >= {
        "one unit of work, end to end", "K=10 delayed submissions pending, one due (alarm)"}
    assert chart.stat().st_size > 0
    assert "Targets:" in done.stdout
    assert "skipped" not in done.stderr and "not measured" not in done.stdout
