"""The mutation gate over CloudflareStorage in real workerd.

A gate mutation must commit its source fact, the lane enrollment, the generation bump and the
alarm together, or none of them (the alarm invariant's producer half). The success case is read
at the eviction point: the mutation is cut off the instant its transaction commits, so an alarm
written after the commit is never written and the test sees the commit alone.
"""

from __future__ import annotations

from workerd_runtime import Runtime

NATIVE = "threadline:native"


def test_a_failed_mutation_leaves_nothing(workerd: Runtime) -> None:
    seen = workerd.probe("gate-fail", "gate", fail="1")
    assert seen["raised"] == "Boom"
    assert seen["fact"] == 0
    assert seen["lanes"] == {"probe.lane": None, NATIVE: None}
    assert seen["earliest_due"] is None
    assert seen["dirty_after"] == seen["dirty_before"]
    assert seen["alarm"] is None


def test_a_mutation_commits_fact_enrollment_generation_and_alarm_together(
    workerd: Runtime,
) -> None:
    seen = workerd.probe("gate-ok", "gate", fail="0", lose_at_commit="1")
    assert seen["raised"] == "LostAtCommit"
    assert seen["fact"] == 1
    lane, native = seen["lanes"]["probe.lane"], seen["lanes"][NATIVE]
    assert lane is not None and lane["state"] == "due"
    assert native is not None and native["state"] == "due"
    assert seen["dirty_after"] == seen["dirty_before"] + 1
    # The alarm read back from workerd (not the adapter's cache) covers the earliest due lane.
    assert seen["alarm"] is not None
    assert seen["alarm"] == seen["known_alarm"]
    assert seen["alarm"] <= max(seen["earliest_due"], seen["now"] + seen["min_delay"])
    # Billed cost, for the record: one indexed row read for next(), nothing written.
    assert seen["next_cost"] == [1, 0]
    print(
        "workerd billed rows [read, written]: mutate",
        seen["mutate_cost"],
        "alarm writes",
        seen["mutate_alarm_writes"],
        "next()",
        seen["next_cost"],
    )
