"""Schedules in real workerd: an ``every`` schedule fires on the object's live alarm and its
submission settles, and a runtime killed in between loses nothing: the next fire time is
durable, the schedule goes on firing after the restart, and each fire admitted once.

The ``sched-*`` spaces are served by ``ScheduledThreadObject`` (``probe/probe_entry.py``),
whose app fires ``tick`` every two seconds: each fire submits its fire time to the Thread
``ticks``, where the ``tick-echo`` agent records it. Each test runs its own runtime, so the
schedule's alarms never run beside other tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_workerd_maintenance import kill_workerd
from workerd_runtime import TOKEN, Runtime, wait_for

SPACE = "/v1/spaces/sched-live"
TIMEOUT_S = 30.0
EVERY_MS = 2_000


def _get(runtime: Runtime, path: str) -> Any:
    reply = runtime.request(SPACE + path, token=TOKEN)
    assert reply.status == 200, (reply.status, reply.body, runtime.output())
    return reply.json()


def _tick(runtime: Runtime) -> dict[str, Any]:
    [schedule] = _get(runtime, "/schedules")["schedules"]
    assert schedule["id"] == "tick"
    return dict(schedule)


def _fired(runtime: Runtime, after: int | None) -> dict[str, Any] | None:
    schedule = _tick(runtime)
    last = schedule["last_fire"]
    return schedule if last is not None and (after is None or last > after) else None


def _records(runtime: Runtime) -> list[dict[str, Any]]:
    """What the fires' runs emitted (the log also holds their settlement records)."""
    records = _get(runtime, "/threads/ticks/history?limit=200")["records"]
    return [record for record in records if record["kind"] == "record"]


def _settled_fires(runtime: Runtime) -> dict[int, dict[str, Any]]:
    """The submission of each fire the Thread recorded, read back, by fire time."""
    fires: dict[int, dict[str, Any]] = {}
    for record in _records(runtime):
        detail = _get(runtime, f"/threads/ticks/submissions/{record['submission_id']}")
        fires[int(record["body"]["fire"])] = detail
    return fires


def _all_settled(runtime: Runtime, after: int) -> dict[int, dict[str, Any]] | None:
    """Every fire's submission, once one fire later than ``after`` ran and all are settled."""
    fires = _settled_fires(runtime)
    if not fires or max(fires) <= after:
        return None
    return fires if all(d["state"] == "settled" for d in fires.values()) else None


def test_an_every_schedule_fires_on_the_live_alarm_and_its_submission_settles(
    start_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    first = start_runtime(tmp_path / "state")
    try:
        first.warm()
        started = _tick(first)  # the first request starts the object, and the schedule
        assert started["kind"] == "every" and started["interval_ms"] == EVERY_MS
        assert started["next_fire"] % EVERY_MS == 0
        fired = wait_for(lambda: _fired(first, None), timeout=TIMEOUT_S,
                         what="the first fire on the live alarm")
        assert fired["state"] in ("scheduled", "running") and fired["last_error"] is None
        assert fired["last_fire"] >= started["next_fire"]
        settled = wait_for(lambda: {fire: detail for fire, detail in _settled_fires(first).items()
                                    if detail["state"] == "settled"},
                           timeout=TIMEOUT_S, what="a scheduled submission to settle")
        fire, detail = min(settled.items())
        assert fire % EVERY_MS == 0
        assert detail["outcome"] == "completed"
        assert detail["result"] == {"fire": fire, "attempt": 1}
        assert detail["idempotency_key"].startswith("schedule:tick:")
        assert detail["created_at"] >= fire  # admitted by the fire, not before it
        before_kill = _tick(first)
        kill_workerd(first)
    finally:
        first.stop()

    second = start_runtime(tmp_path / "state")
    try:
        second.warm()
        # The durable next fire survived; the schedule goes on from there.
        assert _tick(second)["next_fire"] >= before_kill["next_fire"]
        wait_for(lambda: _fired(second, before_kill["last_fire"]), timeout=TIMEOUT_S,
                 what="a fire after the restart")
        # The fire is recorded before its submission runs: wait until a fire after the kill
        # has run and recorded too, not only for the fires recorded so far to be settled.
        final = wait_for(lambda: _all_settled(second, after=before_kill["last_fire"]),
                         timeout=TIMEOUT_S, what="a fire after the kill, every one settled")
    finally:
        second.stop()
    fires = sorted(final)
    early = sum(fire <= before_kill["last_fire"] for fire in fires)
    print(f"\nworkerd: {len(fires)} fires settled, {early} of them before the kill")
    assert fires[-1] > before_kill["last_fire"]
    assert all(fire % EVERY_MS == 0 for fire in fires)
    keys = [detail["idempotency_key"] for detail in final.values()]
    assert len(keys) == len(set(keys))  # each fire admitted once
    assert all(detail["outcome"] == "completed" for detail in final.values())
