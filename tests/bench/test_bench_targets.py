"""The verdicts scenarios 3 and 4 print against their targets, and how their rows show."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.model import WORKERD, Measurement  # noqa: E402
from bench.report import table  # noqa: E402
from bench.targets import BY_ID  # noqa: E402


def _burst(alarms_per_submission: float, settled_per_s: float, p50: float) -> Measurement:
    return Measurement("3", WORKERD, "burst", runs=[{
        "alarms_per_submission": alarms_per_submission, "settlements_per_s": settled_per_s,
        "p50_ms": p50, "p99_ms": p50 * 2,
    }])


def _verdicts(scenario: str, ms: list[Measurement]) -> list[str]:
    judge = BY_ID[scenario].judge
    assert judge is not None
    return judge(ms)


def test_burst_targets_are_strict_where_the_issue_says_under() -> None:
    met = _verdicts("3", [_burst(0.09, 500, 14.9)])
    assert all(v.endswith(": met") for v in met), met
    at_limit = _verdicts("3", [_burst(0.1, 499, 15)])
    assert all("MISSED" in v for v in at_limit), at_limit
    assert "MISSED by 1 " in at_limit[1]


def test_turn_targets_judge_attempt_start_and_first_record() -> None:
    cases = {
        "admission -> Attempt start (object clock)": 19.0,
        "admission -> first SSE record": 50.0,
        "admission (POST round trip)": 999.0,
    }
    ms = [Measurement("4", WORKERD, case, runs=[{"p50_ms": p50, "p99_ms": p50}])
          for case, p50 in cases.items()]
    verdicts = _verdicts("4", ms)
    assert len(verdicts) == 2
    assert verdicts[0].endswith(": met")
    assert "MISSED" in verdicts[1]


def test_latency_rows_show_percentiles_per_run_as_median_and_range() -> None:
    m = Measurement("4", WORKERD, "admission -> first SSE record",
                    runs=[{"p50_ms": p50, "p99_ms": 40.0} for p50 in (30.0, 10.0, 20.0)])
    row = next(line for line in table([m]).splitlines() if line.startswith("4 "))
    assert "20.0 [10.0-30.0]" in row
    assert "40.0" in row


def test_schedule_fires_are_judged_flat_in_n_per_kind_of_alarm() -> None:
    def fire(n: int, what: str, read: int) -> Measurement:
        return Measurement("8", WORKERD, f"N={n}: {what}", runs=[{
            "rows_read": read, "rows_written": 8, "set_alarm": 1, "delete_alarm": 0}])

    verdicts = _verdicts("8", [fire(1, "fire, nothing submitted", 13),
                               fire(100, "fire, nothing submitted", 13),
                               fire(1, "that submission's run", 31),
                               fire(100, "that submission's run", 32)])
    assert verdicts[0].startswith("fire, nothing submitted: flat in N: met")
    assert verdicts[1] == ("that submission's run: flat in N: MISSED (N=1 31 read, 9 written "
                           "(billed); N=100 32 read, 9 written (billed))")


def _unit(billed: float) -> Measurement:
    return Measurement("2", WORKERD, "end to end", runs=[{
        "rows_written": billed - 3, "set_alarm": 2, "delete_alarm": 1,
    }])


def test_one_submission_is_judged_against_fourteen_billed_rows() -> None:
    assert _verdicts("2", [_unit(14)]) == [
        "end to end: rows written (billed) 14 <= 14: met"]
    assert _verdicts("2", [_unit(15)]) == [
        "end to end: rows written (billed) 15 > 14: MISSED by 1 (1.1x)"]
