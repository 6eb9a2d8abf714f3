"""The platform fact a maintenance pass relies on to skip its alarm writes: when the alarm
fires, workerd empties the slot before the handler runs; a handler that writes nothing leaves
it empty, and one it writes during the handler survives the handler's end."""

from __future__ import annotations

from typing import Any

from workerd_runtime import Runtime, wait_for

ALARM_TIMEOUT_S = 20.0


def _seen(workerd: Runtime, obj: str) -> dict[str, Any] | None:
    state = workerd.probe(obj, "alarm-slots")
    return state if state["seen"] else None


def test_the_slot_is_empty_inside_the_handler_and_stays_empty_after_it(
        workerd: Runtime) -> None:
    workerd.probe("slot-fired", "commit", alarm_in="inside", delay_ms=300)
    state = wait_for(lambda: _seen(workerd, "slot-fired"), timeout=ALARM_TIMEOUT_S,
                     what="the handler's view of its slot")
    assert state["seen"] == [{"at_start": None, "rearmed_at": None, "after_rearm": None}]
    # The handler wrote nothing: once it returned the slot is still empty.
    assert state["alarm"] is None


def test_a_slot_written_inside_the_handler_is_read_back_and_survives_its_end(
        workerd: Runtime) -> None:
    workerd.probe("slot-rearmed", "arm-rearming", delay_ms=300, rearm_ms=3_600_000)
    state = wait_for(lambda: _seen(workerd, "slot-rearmed"), timeout=ALARM_TIMEOUT_S,
                     what="the handler's view of its slot")
    (seen,) = state["seen"]
    assert seen["at_start"] is None
    assert seen["rearmed_at"] is not None
    assert seen["after_rearm"] == seen["rearmed_at"]
    # The write the handler made is the slot after it returned (not emptied by the firing).
    assert state["alarm"] == seen["rearmed_at"]
