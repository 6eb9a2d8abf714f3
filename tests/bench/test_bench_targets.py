"""The verdicts scenarios 3, 4 and 10 print against their targets, and how their rows show."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.model import AGENTS, WORKERD, Measurement  # noqa: E402
from bench.report import table  # noqa: E402
from bench.targets import BY_ID  # noqa: E402


def _burst(alarms_per_submission: float, settled_per_s: float, p50: float, p99: float,
           idle_p50: float = 10.0, system: str = WORKERD) -> Measurement:
    return Measurement("3", system, "burst", runs=[{
        "alarms_per_submission": alarms_per_submission, "settlements_per_s": settled_per_s,
        "p50_ms": p50, "p99_ms": p99, "idle_p50_ms": idle_p50,
    }])


def _verdicts(scenario: str, ms: list[Measurement]) -> list[str]:
    judge = BY_ID[scenario].judge
    assert judge is not None
    return judge(ms)


def test_burst_targets_are_strict_where_the_issue_says_under() -> None:
    met = _verdicts("3", [_burst(0.09, 500, 20.0, 99.9)])
    assert all(v.endswith(": met") for v in met), met
    missed = _verdicts("3", [_burst(0.1, 499, 20.1, 100)])
    assert all("MISSED" in v for v in missed), missed
    assert "MISSED by 1 " in missed[1]


def test_burst_is_set_beside_the_agents_sdk_with_ratios_and_goals() -> None:
    lines = table([_burst(0.01, 100, 30, 60, 15),
                   _burst(0.01, 200, 20, 40, 10, system=AGENTS)]).splitlines()
    start = lines.index(next(line for line in lines if line.startswith("Side by side, scenario 3")))
    shown = lines[start + 1:start + 7]
    assert shown[0] == "  settled/s: 100 | 200 | 0.50x"
    assert shown[1] == "  admission p50 ms: 30.0 | 20.0 | 1.50x"
    assert shown[3] == "  idle admission p50 ms: 15.0 | 10.0 | 1.50x"
    assert "MISSED" in shown[4]
    assert shown[5].endswith("1.5x <= 1.5x: met")


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


def test_the_caught_up_and_timer_targets_are_the_issues_figures() -> None:
    from bench.model import Measurement

    caught_up = BY_ID["1"].judge
    timers = BY_ID["5"].judge
    assert caught_up is not None and timers is not None

    def measured(case: str, read: int, written: int) -> Measurement:
        return Measurement(scenario="x", system="threadline (workerd)", case=case,
                           runs=[{"rows_read": read, "rows_written": written,
                                  "set_alarm": 0, "delete_alarm": 0}])

    assert all(v.endswith("met") for v in caught_up([measured("settled=0", 1, 0)]))
    assert any("MISSED" in v for v in caught_up([measured("settled=0", 1, 1)]))
    verdicts = timers([measured("K=10", 20, 6), measured("K=100", 20, 6)])
    assert all(v.endswith("met") for v in verdicts)
    assert any("MISSED" in v for v in timers([measured("K=10", 20, 6),
                                               measured("K=100", 21, 6)]))


def test_before_and_after_sets_each_under_load_figure_of_a_case_beside_its_earlier_one() -> None:
    from bench.report import before_after

    def rows(read: float, written: float, alarm: float, case: str = "K=10") -> Measurement:
        return Measurement("5", WORKERD, case, runs=[
            {"rows_read": read, "rows_written": written, "set_alarm": alarm}])

    before = [_burst(0.1, 67, 95.0, 308.0, 35.0), rows(46, 10, 2),
              Measurement("3", AGENTS, "burst", runs=[{"settlements_per_s": 1.0}])]
    after = [_burst(0.002, 80, 60.0, 120.0, 30.0), rows(37, 11, 2), rows(9, 9, 9, "K=99")]
    lines = before_after(before, after)
    assert lines[1] == "Before -> after (threadline (workerd); median [min-max]):"
    assert "  3 burst: settled/s 67 -> 80" in lines
    assert "  3 burst: admission p50 ms 95.0 -> 60.0" in lines
    assert "  3 burst: alarms per submission 0.100 -> 0.002" in lines
    assert "  5 K=10: rows read 46 -> 37" in lines
    assert "  5 K=10: billed written 12 -> 13" in lines
    # A case only one run has, and the Agents SDK's figures, are left out.
    assert not any("K=99" in line or "agents" in line for line in lines)
    assert before_after([], after) == []


def _llm(system: str, case: str, **figures: float) -> Measurement:
    return Measurement("10", system, case, runs=[figures])


def test_llm_turns_are_judged_on_the_ratio_to_one_alone_and_the_first_delta() -> None:
    met = _verdicts("10", [_llm(WORKERD, "50 Threads at once (turn.stream)",
                                ratio_to_alone=1.5, p50_ms=1050, p99_ms=1100)])
    assert len(met) == 3 and all(v.endswith(": met") for v in met), met
    missed = _verdicts("10", [
        _llm(WORKERD, "50 Threads at once (turn.stream)", ratio_to_alone=4.1, p50_ms=1101,
             p99_ms=2000),
        _llm(WORKERD, "50 Threads at once (one emit per token)", rows_written=400)])
    assert len(missed) == 3 and all("MISSED" in v for v in missed), missed
    assert "4.1 > 1.5" in missed[0]


def test_llm_turns_are_set_beside_the_agents_sdk_chat_agent() -> None:
    lines = table([
        _llm(WORKERD, "one turn alone (turn.stream)", rows_written=21, rows_read=90,
             alarm_writes=4, p50_ms=1030, settled_s=2.1),
        _llm(WORKERD, "50 Threads at once (turn.stream)", settled_s=8.4, ratio_to_alone=4.0,
             p50_ms=1500, p99_ms=2500),
        _llm(AGENTS, "AIChatAgent: one message alone", rows_written=46, rows_read=159,
             set_alarm=5, delete_alarm=2, p50_ms=1010, settled_s=2.07),
        _llm(AGENTS, "AIChatAgent: 50 conversations at once (50 agents)", settled_s=3.0,
             ratio_to_alone=1.45, p50_ms=1100, p99_ms=1200),
    ]).splitlines()
    start = lines.index(next(line for line in lines
                             if line.startswith("Side by side, scenario 10")))
    shown = lines[start + 1:start + 10]
    assert shown[0] == "  rows written per turn: 21 | 46"
    assert shown[4] == "  N at once: all settled s: 8.40 | 3.00"
    assert shown[5] == "  N at once: x one alone: 4.00 | 1.45"
    assert shown[8] == "  billed rows written per turn (alarm writes included): 25 | 53"
