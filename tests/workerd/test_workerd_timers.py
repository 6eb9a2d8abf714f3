"""An event may hold 10,000 active JavaScript timeouts; the deployed clock's timers hold none
once cancelled.

Each Attempt races its agent against a timer. A cancelled event-loop timer only skips its
callback when it falls due: the JavaScript timeout under it stays active, and workerd refuses
the 10,001st with ``QuotaExceededError``. A pass that ran that many Attempts in one alarm
failed every later one with it (found by the bench: 10,000 sleeping submissions seeded at
once, the last failed for good). The deployed clock clears the timeout when its timer is done.
"""

from __future__ import annotations

from workerd_runtime import Runtime

#: More timers than one event may hold active.
TIMERS = 10_500


def test_cancelled_event_loop_timers_stay_active_until_the_event_runs_out_of_them(
    workerd: Runtime,
) -> None:
    reply = workerd.request(f"/_probe/timers-system/timers?clock=system&n={TIMERS}",
                            timeout=120)
    assert reply.status == 500, (reply.status, reply.body)
    assert b"QuotaExceededError" in reply.body and b"max active timeouts: 10000" in reply.body


def test_the_deployed_clock_clears_each_timeout_with_its_timer(workerd: Runtime) -> None:
    assert workerd.probe("timers-workers", "timers", clock="workers", n=str(TIMERS)) == {
        "timers": TIMERS}
