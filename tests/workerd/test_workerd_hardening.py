"""Runtime hardening in real workerd: values over the platform's row limit (SQLITE_TOOBIG).

The probe app raises ``max_value_bytes`` above the platform's 2 MB limit, so a 3 MB value gets
past the runtime's own check and is refused by workerd's SQLite itself.
"""

from __future__ import annotations

import itertools

from workerd_runtime import Runtime

_threads = itertools.count(1)


def _thread(name: str) -> str:
    return f"{name}-{next(_threads)}"


def test_an_uncertain_step_whose_value_storage_refuses_runs_once(workerd: Runtime) -> None:
    seen = workerd.probe("hardening", "hardening", agent="big-step", thread=_thread("step"))
    print("workerd uncertain step over the row limit:", seen["attempts"], seen["error"])
    assert seen["runs"] == 1
    assert seen["state"] == "settled" and seen["outcome"] == "failed"
    assert seen["attempts_charged"] == 1
    assert seen["journal"] == {"step:act": "failed"}
    assert "SQLITE_TOOBIG" in seen["error"]["message"] or "too big" in seen["error"]["message"]


def test_a_result_storage_refuses_fails_at_once_with_its_reason(workerd: Runtime) -> None:
    seen = workerd.probe("hardening", "hardening", agent="big-result", thread=_thread("result"))
    print("workerd result over the row limit:", seen["attempts"], seen["error"])
    assert seen["attempts"] == ["failed"]  # settled by the first Attempt, not by lease expiry
    assert seen["runs"] == 1
    assert seen["state"] == "settled" and seen["outcome"] == "failed"
    assert seen["error"]["type"] == "NonRetryable"
    assert "SQLITE_TOOBIG" in seen["error"]["message"] or "too big" in seen["error"]["message"]


def test_a_value_over_max_value_bytes_fails_naming_the_limit(workerd: Runtime) -> None:
    seen = workerd.probe("hardening", "hardening", agent="over-limit", thread=_thread("limit"))
    assert seen["attempts"] == ["failed"]
    assert seen["journal"] == {"step:act": "failed"}
    assert "max_value_bytes (262144)" in seen["error"]["message"]


def test_a_submission_keeps_its_first_and_latest_failures_in_workerd(workerd: Runtime) -> None:
    seen = workerd.probe("hardening", "failures", thread=_thread("failures"))
    assert (seen["state"], seen["failures"]) == ("settled", 12)
    # The first and the latest nine, each retried but the last.
    assert seen["kept"] == [[n, f"try {n}", n == 12, n != 12] for n in (1, *range(4, 13))]
