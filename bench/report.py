"""Printing the table, writing ``results.json`` and drawing the chart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bench.model import AGENTS, SIM, WORKERD, Measurement
from bench.targets import SCENARIOS, _at_least, billed_written

COLUMNS = [
    ("rows_read", "rows read"),
    ("rows_written", "rows written"),
    ("alarm_writes", "alarm set/del"),
    ("billed_written", "billed written"),
    ("statements", "statements"),
    ("alarms", "alarms"),
    ("wall_ms", "wall ms"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("other", "other (scenarios 3, 4, 10)"),
]
#: The figures of scenarios 3 and 4 that the "other" column shows, and their format.
OTHER = [
    ("alarms_per_submission", "alarms/submission", ".3f"),
    ("settlements_per_s", "settled/s", ".0f"),
    ("max_ms", "max ms", ".1f"),
    ("idle_p50_ms", "idle admission p50 ms", ".1f"),
    ("admission_s", "admission s", ".2f"),
    ("settle_lag_s", "then settled in s", ".2f"),
    ("settled_s", "all settled s", ".2f"),
    ("ratio_to_alone", "x one alone", ".2f"),
    ("max_in_flight", "model calls at once", "g"),
    ("alarm_writes", "alarm writes/turn", ".2g"),
]
#: Scenario 3's figures on the passes against admission, printed under the table.
GATE = [
    ("max_settled_per_pass", "most settled by one pass", "g"),
    ("pass_ms_p50", "pass ms p50", "g"),
    ("pass_ms_max", "pass ms max", "g"),
    ("pass_busy_s", "passes busy s", ".2f"),
    ("posts_during_pass", "POSTs overlapping a pass", "g"),
    ("p50_ms_during_pass", "their round trip p50 ms", ".1f"),
    ("p50_ms_outside_pass", "the others' p50 ms", ".1f"),
]
_FORMATS = {"wall_ms": ".2f", "p50_ms": ".1f", "p99_ms": ".1f"}


def _range(figure: dict[str, float], fmt: str) -> str:
    med, lo, hi = figure["median"], figure["min"], figure["max"]
    if lo == hi:
        return format(med, fmt)
    return f"{format(med, fmt)} [{format(lo, fmt)}-{format(hi, fmt)}]"


def _figure(summary: dict[str, dict[str, float]], key: str) -> str:
    if key == "alarm_writes":
        if "set_alarm" not in summary:
            return "-"
        return f"{summary['set_alarm']['median']:g}/{summary['delete_alarm']['median']:g}"
    if key == "billed_written":
        if "rows_written" not in summary:
            return "-"
        total = sum(summary[k]["median"] for k in ("rows_written", "set_alarm", "delete_alarm")
                    if k in summary)
        return f"{total:g}"
    if key == "other":
        shown = [f"{label} {_range(summary[k], fmt)}" for k, label, fmt in OTHER if k in summary]
        return "; ".join(shown) if shown else "-"
    figure = summary.get(key)
    if figure is None:
        return "-"
    return _range(figure, _FORMATS.get(key, "g"))


def table(measurements: list[Measurement]) -> str:
    """One table: every case of every scenario, then the targets and the ratios."""
    header = ["scenario", "case", "system"] + [title for _, title in COLUMNS]
    rows: list[list[str]] = []
    for scenario in SCENARIOS:
        for m in (m for m in measurements if m.scenario == scenario.id):
            summary = m.summary()
            rows.append([m.scenario, m.case, m.system]
                        + [_figure(summary, key) for key, _ in COLUMNS])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    lines.append("")
    lines.append("Figures: median [min-max] over the runs. billed written = rows written "
                 "(index entries included) + alarm set/delete calls.")
    lines.append("The sqlite3 approximation counts rows returned and rows changed, "
                 "not index entries.")
    lines.append("Scenarios 3 and 4 (workerd, over HTTP): p50/p99 ms are per run, then the "
                 "median [min-max] over the runs. 3: admission = one POST's round trip seen by "
                 "the client;")
    lines.append("  alarms = alarm handler runs from the first POST until the object is quiet; "
                 "settled/s = submissions / (first POST sent -> driver sees all settled).")
    lines.append("  4: from sending the POST; Attempt start (object clock) = journal step "
                 "started_at - submission created_at, both on the object's clock, which inside "
                 "workerd moves only across I/O;")
    lines.append("  Attempt start (seen on SSE) = first stream event showing it started (upper "
                 "bound); first SSE record = the echo's record on the open stream.")
    lines.append("  A pass that awaits no real I/O holds the object's input gate: POSTs arriving "
                 "meanwhile wait (pass times on the object's clock, a lower bound).")
    lines.append("Scenario 10: rows are per turn (per message for the Agents SDK), the object's "
                 "whole meter from quiet to quiet (admissions, passes, event streams); p50/p99 "
                 "ms = admission -> first delta")
    lines.append("  on the Thread's event stream (the Agents SDK: request frame -> first "
                 "text-delta frame on its WebSocket); sqlite3 = simulated time.")
    for m in measurements:
        if m.scenario == "3":
            summary = m.summary()
            shown = [f"{label} {_range(summary[k], fmt)}" for k, label, fmt in GATE
                     if k in summary]
            if shown:  # the Agents SDK has no passes to show
                lines.append(f"  3, passes against admission ({m.case}): " + "; ".join(shown))
    lines.append("")
    lines.append("Targets:")
    for scenario in SCENARIOS:
        lines.append(f"  {scenario.id}. {scenario.title}: {scenario.target}")
        if scenario.judge is None:
            continue
        for system in (WORKERD, SIM):
            mine = [m for m in measurements if m.scenario == scenario.id and m.system == system]
            if mine:
                for verdict in scenario.judge(mine):
                    lines.append(f"     [{system}] {verdict}")
    lines += burst_side_by_side(measurements)
    lines += llm_side_by_side(measurements)
    ratios = side_by_side(measurements)
    if ratios:
        lines.append("")
        lines.append("Side by side, Agents SDK / threadline (workerd), billed rows:")
        for ratio in ratios:
            lines.append(
                f"  {ratio['what']}: rows read {ratio['agents_read']:g} /"
                f" {ratio['threadline_read']:g} = {_ratio(ratio['read_ratio'])}; rows written"
                f" {ratio['agents_written']:g} / {ratio['threadline_written']:g}"
                f" = {_ratio(ratio['written_ratio'])}"
            )
    return "\n".join(lines)


#: Scenario 3's figures set side by side: (key, label, format).
BURST_FIGURES = [
    ("settlements_per_s", "settled/s", ".0f"),
    ("p50_ms", "admission p50 ms", ".1f"),
    ("p99_ms", "admission p99 ms", ".1f"),
    ("idle_p50_ms", "idle admission p50 ms", ".1f"),
]


def burst_side_by_side(measurements: list[Measurement]) -> list[str]:
    """Scenario 3's burst through both systems: each figure (median [min-max]) and the ratio
    threadline / Agents SDK of the medians; nothing unless both ran."""
    ours = next((m for m in measurements if (m.scenario, m.system) == ("3", WORKERD)), None)
    theirs = next((m for m in measurements if (m.scenario, m.system) == ("3", AGENTS)), None)
    if ours is None or theirs is None:
        return []
    lines = ["", "Side by side, scenario 3's burst (threadline (workerd) | Agents SDK (workerd)"
             " | threadline / Agents SDK):"]
    mine, other = ours.summary(), theirs.summary()
    for key, label, fmt in BURST_FIGURES:
        if key not in mine or key not in other:
            continue
        a, b = mine[key]["median"], other[key]["median"]
        ratio = f"{a / b:.2f}x" if b else "n/a"
        lines.append(f"  {label}: {_range(mine[key], fmt)} | {_range(other[key], fmt)} | {ratio}")
    ours_s, theirs_s = ours.median("settlements_per_s") or 0, theirs.median("settlements_per_s")
    if theirs_s:
        verdict = _at_least("settled/s against the Agents SDK's (ratio)", ours_s / theirs_s, 1)
        lines.append(f"  goal: {verdict}")
    ours_p, theirs_p = ours.median("p50_ms") or 0, theirs.median("p50_ms")
    if theirs_p:
        ratio_p = round(ours_p / theirs_p, 2)
        lines.append("  goal: admission p50 against the Agents SDK's "
                     + (f"{ratio_p:g}x <= 1.5x: met" if ratio_p <= 1.5
                        else f"{ratio_p:g}x > 1.5x: MISSED"))
    return lines


def llm_side_by_side(measurements: list[Measurement]) -> list[str]:
    """Scenario 10 through threadline (workerd) and the Agents SDK's ``AIChatAgent``: rows
    written per turn, time to the first delta, and N at once; nothing unless both ran."""
    def find(system: str, start: str) -> Measurement | None:
        return next((m for m in measurements if m.scenario == "10" and m.system == system
                     and m.case.startswith(start)), None)

    ours, theirs = find(WORKERD, "one turn alone"), find(AGENTS, "AIChatAgent: one message")
    if ours is None or theirs is None:
        return []
    lines = ["", "Side by side, scenario 10 (threadline (workerd) turn.stream | Agents SDK"
             " AIChatAgent (workerd)):"]
    shown = [("rows written per turn", "rows_written", "g", ours, theirs),
             ("rows read per turn", "rows_read", "g", ours, theirs),
             ("first delta ms, one alone", "p50_ms", ".0f", ours, theirs),
             ("settled s, one alone", "settled_s", ".2f", ours, theirs)]
    many_ours = next((m for m in measurements if (m.scenario, m.system) == ("10", WORKERD)
                      and m.case.endswith("at once (turn.stream)")), None)
    many_theirs = next((m for m in measurements if (m.scenario, m.system) == ("10", AGENTS)
                        and "at once" in m.case), None)
    if many_ours is not None and many_theirs is not None:
        shown += [("N at once: all settled s", "settled_s", ".2f", many_ours, many_theirs),
                  ("N at once: x one alone", "ratio_to_alone", ".2f", many_ours, many_theirs),
                  ("N at once: first delta p50 ms", "p50_ms", ".0f", many_ours, many_theirs),
                  ("N at once: first delta p99 ms", "p99_ms", ".0f", many_ours, many_theirs)]
    for label, key, fmt, a, b in shown:
        mine, other = a.summary().get(key), b.summary().get(key)
        if mine is not None and other is not None:
            lines.append(f"  {label}: {_range(mine, fmt)} | {_range(other, fmt)}")
    written = billed_written(theirs)
    lines.append(f"  billed rows written per turn (alarm writes included): "
                 f"{(ours.median('rows_written') or 0) + (ours.median('alarm_writes') or 0):g}"
                 f" | {written:g}")
    return lines


def _ratio(value: float | None) -> str:
    return "n/a (threadline 0)" if value is None else f"{value:.2f}x"


def side_by_side(measurements: list[Measurement]) -> list[dict[str, Any]]:
    """Agents SDK / threadline for each K (scenario 5 and 7 vs 6a) and the unit of work (2 vs
    6b)."""
    pairs: list[tuple[str, Measurement, Measurement]] = []
    for agents in measurements:
        if agents.system != AGENTS:
            continue
        if agents.case.startswith("schedule() K="):
            k = agents.case.split("K=", 1)[1]
            for scenario, what in (("5", f"K={k} pending, one due (alarm)"),
                                   ("7", f"K={k} delayed submissions pending, one due (alarm)")):
                match = _find(measurements, scenario, WORKERD, f"K={k}")
                if match is not None:
                    pairs.append((what, agents, match))
            continue
        if agents.case == "queue() end to end":
            match = _find(measurements, "2", WORKERD, "end to end")
            if match is not None:
                pairs.append(("one unit of work, end to end", agents, match))
    out = []
    for what, agents, ours in pairs:
        a_read, t_read = agents.median("rows_read") or 0, ours.median("rows_read") or 0
        a_written, t_written = billed_written(agents), billed_written(ours)
        out.append({
            "what": what,
            "agents_read": a_read, "threadline_read": t_read,
            "read_ratio": a_read / t_read if t_read else None,
            "agents_written": a_written, "threadline_written": t_written,
            "written_ratio": a_written / t_written if t_written else None,
        })
    return out


def _find(ms: list[Measurement], scenario: str, system: str, case: str) -> Measurement | None:
    return next((m for m in ms if (m.scenario, m.system, m.case) == (scenario, system, case)),
                None)


#: The scenarios ``--explain`` prints per statement: the row figures the maintenance pass owns.
EXPLAINED = frozenset({"1", "2", "5"})


def explain(measurements: list[Measurement]) -> str:
    """The per-statement rows of scenarios 1, 2 and 5 (one run each), heaviest writers first."""
    lines: list[str] = []
    for m in measurements:
        if m.scenario not in EXPLAINED or m.explain is None:
            continue
        lines.append(f"Scenario {m.scenario}, {m.case}, {m.system}: "
                     f"per statement (count, read, written)")
        for entry in sorted(m.explain, key=lambda e: (-e["rows_written"], -e["rows_read"])):
            lines.append(f"  {entry['count']:>3} {entry['rows_read']:>5} "
                         f"{entry['rows_written']:>5}  {entry['sql']}")
        lines.append("")
    return "\n".join(lines)


def write_json(path: Path, measurements: list[Measurement], meta: dict[str, Any]) -> None:
    """Write every figure (and the side-by-side ratios) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        **meta,
        "scenarios": [
            {"id": s.id, "title": s.title, "target": s.target}
            for s in SCENARIOS
        ],
        "measurements": [m.as_dict() for m in measurements],
        "side_by_side": side_by_side(measurements),
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


_K = re.compile(r"K=([\d,]+)")


def draw(path: Path, measurements: list[Measurement]) -> None:
    """Rows read by the alarm serving the due item (a timer, a delayed submission, a
    ``schedule()``), against K, per system (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    series = [
        (WORKERD, "5", "threadline timers (workerd)", "o-"),
        (SIM, "5", "threadline timers (sqlite3 approximation)", "s--"),
        (WORKERD, "7", "threadline delayed submissions (workerd)", "D-"),
        (AGENTS, "6", "Agents SDK schedule() (workerd)", "^-"),
    ]
    for system, scenario, label, style in series:
        points = []
        for m in measurements:
            match = _K.search(m.case)
            if m.system == system and m.scenario == scenario and match:
                summary = m.summary()["rows_read"]
                points.append((int(match.group(1).replace(",", "")), summary))
        if not points:
            continue
        points.sort()
        ks = [k for k, _ in points]
        med = [max(s["median"], 0.5) for _, s in points]
        err = [[s["median"] - s["min"] for _, s in points],
               [s["max"] - s["median"] for _, s in points]]
        ax.errorbar(ks, med, yerr=err, fmt=style, label=label, capsize=3)
    ax.axhline(10, color="grey", linestyle=":", label="timers' target (10 rows)")
    ax.axhline(15, color="green", linestyle=":", label="delayed submissions' target (15 rows)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("K pending (one due)")
    ax.set_ylabel("rows read by the alarm serving it")
    ax.set_title("Rows read by the alarm serving the due one, against K pending")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


#: The figures the under-load work is judged by, per scenario: (metric, label, format). Rows
#: of scenarios 1, 2 and 5 are workerd's billed counters; 3 and 4 are times over HTTP.
BEFORE_AFTER: dict[str, list[tuple[str, str, str]]] = {
    "1": [("rows_read", "rows read", "g"), ("billed_written", "billed written", "g")],
    "2": [("rows_read", "rows read", "g"), ("billed_written", "billed written", "g"),
          ("statements", "statements", "g")],
    "3": [("settlements_per_s", "settled/s", ".0f"), ("p50_ms", "admission p50 ms", ".1f"),
          ("p99_ms", "admission p99 ms", ".1f"), ("idle_p50_ms", "idle admission p50 ms", ".1f"),
          ("alarms_per_submission", "alarms per submission", ".3f")],
    "4": [("p50_ms", "p50 ms", ".1f"), ("p99_ms", "p99 ms", ".1f")],
    "5": [("rows_read", "rows read", "g"), ("billed_written", "billed written", "g")],
}


def _before_after_figure(m: Measurement, key: str) -> dict[str, float] | None:
    if key != "billed_written":
        return m.summary().get(key)
    value = billed_written(m)
    return {"median": value, "min": value, "max": value}


def before_after(before: list[Measurement], after: list[Measurement]) -> list[str]:
    """The under-load figures of threadline in workerd, an earlier run beside this one: one
    line per case and figure, ``before -> after`` (median [min-max]); cases only one run has
    are left out."""
    lines = ["", "Before -> after (threadline (workerd); median [min-max]):"]
    for scenario, figures in BEFORE_AFTER.items():
        for now in after:
            if (now.scenario, now.system) != (scenario, WORKERD):
                continue
            then = _find(before, scenario, WORKERD, now.case)
            if then is None:
                continue
            for key, label, fmt in figures:
                old, new = _before_after_figure(then, key), _before_after_figure(now, key)
                if old is None or new is None:
                    continue
                lines.append(f"  {scenario} {now.case}: {label} "
                             f"{_range(old, fmt)} -> {_range(new, fmt)}")
    return lines if len(lines) > 2 else []
