"""The thread runtime on Pyodide in real workerd, over CloudflareStorage."""

from __future__ import annotations

from workerd_runtime import Runtime


def test_a_one_step_submission_settles_and_its_billed_cost_is_bounded(workerd: Runtime) -> None:
    seen = workerd.probe("threads-one-step", "one-step", thread="t1")
    assert seen["outcome"] == "completed"
    assert seen["result"] == {"got": 41}
    assert seen["state"] == "settled"
    print(
        "workerd billed rows [read, written], one-step submission: admission",
        seen["admit_cost"],
        "admission to settlement",
        seen["cost"],
        "alarm writes",
        seen["alarm_writes"],
        "statements",
        seen["statements"],
    )
    # A regression guard on the billed figure (index updates included), not an exact pin.
    assert seen["cost"][1] <= 40


def test_approval_retry_abort_and_idempotency_over_cloudflare_storage(workerd: Runtime) -> None:
    seen = workerd.probe("threads-lifecycle", "lifecycle")
    assert seen["before_approval"] == "suspended"
    assert seen["reviewed"] == ["completed", {"published": True, "attempt": 1}]
    assert "record" in seen["history"]
    assert seen["flaky_after_first"] == [None, "ready"]
    assert seen["flaky"] == ["completed", {"attempt": 2}]
    assert seen["abort"] == ["completed", "settled", "aborted"]
    assert seen["idempotent"] == [True, False, True]
    assert seen["open"] == 1  # the idempotently admitted submission, not yet run
