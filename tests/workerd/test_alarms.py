"""Alarms fire in real workerd, and rows and the pending alarm survive a restart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workerd_runtime import Runtime, wait_for

ALARM_TIMEOUT_S = 20.0


def test_an_alarm_a_few_hundred_ms_ahead_runs_python_alarm(workerd: Runtime) -> None:
    armed = workerd.probe("alarm-soon", "commit", alarm_in="inside", delay_ms=300)

    def fired() -> list[dict[str, int]]:
        return list(workerd.probe("alarm-soon", "alarms")["fired"])

    rows = wait_for(fired, timeout=ALARM_TIMEOUT_S, what="the probe's alarm() row")
    assert rows[0]["fired_at"] >= armed["due"]
    assert rows[0]["retry_count"] == 0  # alarm_info reached Python
    assert rows[0]["is_retry"] == 0
    # The handler returned without re-arming: the slot is empty afterwards.
    assert workerd.probe("alarm-soon", "alarms")["alarm"] is None


def test_rows_and_pending_alarm_survive_a_restart(
    start_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    first = start_runtime(tmp_path, PROBE_RUN="first")
    try:
        first.warm()
        far = first.probe("durable", "commit", alarm_in="inside")  # an hour ahead
        soon = first.probe("durable-soon", "commit", alarm_in="inside", delay_ms=2500)
    finally:
        first.stop()
    assert first.process is None

    second = start_runtime(tmp_path, PROBE_RUN="second")
    try:
        second.warm()
        state = second.probe("durable", "alarms")
        assert state["items"] == 1
        assert state["alarm"] == far["due"]
        # The alarm that came due while (or after) the runtime was down still fires.
        rows = wait_for(
            lambda: second.probe("durable-soon", "alarms")["fired"],
            timeout=ALARM_TIMEOUT_S,
            what="the alarm armed before the restart",
        )
        assert rows[0]["fired_at"] >= soon["due"]
        assert [row["run"] for row in rows] == ["second"]  # pending at the stop, run after it
    finally:
        second.stop()
