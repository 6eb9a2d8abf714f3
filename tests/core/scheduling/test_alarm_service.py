from __future__ import annotations

from typing import Any

from threadline.clock import ManualClock
from threadline.scheduling import AlarmDecision, Scheduler
from threadline.storage import SqliteStorage

HOST = "mail.send"


def test_scheduled_schedule_at_and_cancel(sched: Scheduler, storage: SqliteStorage) -> None:
    assert sched.alarm.scheduled() is None
    sched.alarm.schedule_at(500)
    assert sched.alarm.scheduled() == 500
    sched.alarm.schedule_at(900)  # replaces, even later
    assert sched.alarm.scheduled() == 900
    sched.alarm.cancel()
    assert sched.alarm.scheduled() is None


def test_ensure_by_keeps_the_earlier(sched: Scheduler) -> None:
    sched.alarm.ensure_by(1_000)
    sched.alarm.ensure_by(2_000)
    assert sched.alarm.scheduled() == 1_000
    sched.alarm.ensure_by(400)
    assert sched.alarm.scheduled() == 400


def test_ensure_due_applies_the_minimum_delay(sched: Scheduler, clock: ManualClock) -> None:
    now = clock.now_ms()
    assert sched.alarm.ensure_due(now) is None
    assert sched.alarm.scheduled() is None
    sched.due_queue.enroll(HOST, now - 50)
    assert sched.alarm.ensure_due(now) == now + sched.config.min_alarm_delay_ms
    assert sched.alarm.scheduled() == now + sched.config.min_alarm_delay_ms


def test_decide_rearms_or_clears(sched: Scheduler, clock: ManualClock) -> None:
    now = clock.now_ms()
    sched.alarm.schedule_at(now + 1)
    assert sched.alarm.decide() is AlarmDecision.CLEARED
    assert sched.alarm.scheduled() is None
    sched.due_queue.enroll(HOST, now + 90_000)
    assert sched.alarm.decide() is AlarmDecision.REARMED
    assert sched.alarm.scheduled() == now + 90_000  # later than before: the truth


def test_schedule_now_arms_when_no_pass_runs(sched: Scheduler, clock: ManualClock) -> None:
    sched.alarm.schedule_now()
    assert sched.alarm.scheduled() is None  # nothing due: nothing to wake for
    sched.due_queue.enroll(HOST, clock.now_ms() - 10)
    sched.alarm.schedule_now()
    assert sched.alarm.scheduled() == clock.now_ms()


def test_schedule_now_given_a_known_due_arms_it_without_reading_the_queue(
    sched: Scheduler, clock: ManualClock, storage: SqliteStorage, monkeypatch: Any
) -> None:
    now = clock.now_ms()
    sched.due_queue.enroll(HOST, now + 100)
    statements: list[str] = []
    run = storage.exec

    def spy(sql: str, *params: Any) -> Any:
        statements.append(sql)
        return run(sql, *params)

    monkeypatch.setattr(storage, "exec", spy)
    sched.alarm.schedule_now(due=now + 40)
    assert sched.alarm.scheduled() == now + 40
    assert not any("tl_lanes" in sql for sql in statements)
    sched.alarm.schedule_now(due=now - 10)  # a due time passed arms now
    assert sched.alarm.scheduled() == now
    sched.alarm.schedule_now(due=now + 500)  # never later than the slot already is
    assert sched.alarm.scheduled() == now


def test_schedule_now_during_a_pass_writes_nothing_and_the_final_decision_covers_it(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    storage.take_due_alarm(clock.now_ms())  # the platform emptied the slot to run the pass
    with sched.alarm.wakes_deferred():
        assert sched.alarm.passes_running == 1
        # A producer commits new work mid-pass and asks for an immediate wake.
        before = storage.meter.reading()
        sched.due_queue.enroll(HOST, clock.now_ms())
        enrolled = storage.meter.reading()
        sched.alarm.schedule_now()
        cost = storage.meter.reading() - enrolled
        assert (cost.statements, cost.alarm_writes) == (0, 0)
        assert sched.alarm.scheduled() is None
        assert (enrolled - before).rows_written == 1
        # The pass ends with its explicit decision, which observes the durable queue and
        # spends the deferred wake: the work due now gets the next pass now.
        assert sched.alarm.decide() is AlarmDecision.REARMED
        assert sched.alarm.scheduled() == clock.now_ms()
        # Spent once: a second decision of the same pass keeps the minimum delay.
        assert sched.alarm.decide() is AlarmDecision.REARMED
    assert sched.alarm.passes_running == 0
    assert sched.alarm.scheduled() == clock.now_ms() + sched.config.min_alarm_delay_ms


def test_a_wake_after_the_pass_decision_is_armed_when_the_pass_ends(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    storage.take_due_alarm(clock.now_ms())
    with sched.alarm.wakes_deferred():
        assert sched.alarm.decide() is AlarmDecision.CLEARED
        sched.due_queue.enroll(HOST, clock.now_ms())
        sched.alarm.schedule_now()
        assert sched.alarm.scheduled() is None  # nothing written under the running pass
    assert sched.alarm.scheduled() == clock.now_ms()


def test_a_wake_deferred_by_a_failed_pass_is_dropped(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    storage.take_due_alarm(clock.now_ms())
    sched.due_queue.enroll(HOST, clock.now_ms())
    try:
        with sched.alarm.wakes_deferred():
            sched.alarm.schedule_now()
            raise RuntimeError
    except RuntimeError:
        pass
    assert sched.alarm.scheduled() is None
    # Nor does it linger into the next pass.
    with sched.alarm.wakes_deferred():
        sched.alarm.decide()
    assert sched.alarm.scheduled() == clock.now_ms() + sched.config.min_alarm_delay_ms


def test_wakes_deferred_unwinds_on_error(sched: Scheduler) -> None:
    try:
        with sched.alarm.wakes_deferred():
            raise RuntimeError
    except RuntimeError:
        pass
    assert sched.alarm.passes_running == 0


def test_ensure_due_and_decide_measure_from_the_now_they_are_given(
    sched: Scheduler, clock: ManualClock
) -> None:
    # A pass decides with the "now" it read at its start, not a fresh clock reading.
    given = clock.now_ms() + 10_000
    sched.due_queue.enroll(HOST, clock.now_ms())
    assert sched.alarm.ensure_due(given) == given + sched.config.min_alarm_delay_ms
    assert sched.alarm.scheduled() == given + sched.config.min_alarm_delay_ms
    later = given + 5_000
    assert sched.alarm.decide(later) is AlarmDecision.REARMED
    assert sched.alarm.scheduled() == later + sched.config.min_alarm_delay_ms


def test_decide_known_keeps_the_minimum_delay_from_the_now_it_is_given(
    sched: Scheduler, clock: ManualClock
) -> None:
    """A caught-up pass decides from the earliest due it read; work due sooner than the
    minimum delay still waits that delay, so a pass never re-arms itself closer than that."""
    now = clock.now_ms()
    delay = sched.config.min_alarm_delay_ms
    soon = now + delay // 5
    assert sched.alarm.decide_known(now, soon) is AlarmDecision.REARMED
    assert sched.alarm.scheduled() == now + delay
    far = now + 90_000
    assert sched.alarm.decide_known(now, far) is AlarmDecision.REARMED
    assert sched.alarm.scheduled() == far  # later than before: the truth
    assert sched.alarm.decide_known(now, None) is AlarmDecision.CLEARED
    assert sched.alarm.scheduled() is None


def test_a_wake_during_a_pass_is_spent_once_by_decide_known(
    sched: Scheduler, storage: SqliteStorage, clock: ManualClock
) -> None:
    """Like :meth:`decide`, the caught-up decision spends a wake deferred during the pass:
    the next pass comes when the work is due, not a minimum delay away, and only once."""
    now = clock.now_ms()
    delay = sched.config.min_alarm_delay_ms
    soon = now + delay // 5
    sched.due_queue.enroll(HOST, soon)
    storage.take_due_alarm(now)
    with sched.alarm.wakes_deferred():
        sched.alarm.schedule_now()
        assert sched.alarm.scheduled() is None  # nothing written under the running pass
        assert sched.alarm.decide_known(now, soon) is AlarmDecision.REARMED
        assert sched.alarm.scheduled() == soon
        # Spent: a second decision of the same pass keeps the minimum delay.
        assert sched.alarm.decide_known(now, soon) is AlarmDecision.REARMED
        assert sched.alarm.scheduled() == now + delay
    # Nor is it armed again as the pass ends.
    assert sched.alarm.scheduled() == now + delay
