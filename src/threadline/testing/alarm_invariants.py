"""The alarm-invariant checker: whether due work has an alarm that fires in time.

:func:`alarm_invariant_problem` reads one object's storage and says what breaks the invariant,
if anything; :class:`~threadline.testing.SimulatedObject` runs it after commits when asked to
and raises :class:`AlarmInvariantError`. :class:`QuiescenceError` is raised when an object (or
a runtime) never quiesces.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from threadline.app import Application
from threadline.maintenance import publication_lane
from threadline.maintenance.required_gate import Hold, read_holds, wanted_past
from threadline.maintenance.subscriber_cursors import SubscriberRow
from threadline.scheduling import (
    DELAYED,
    MESSAGES,
    NATIVE,
    PUBLICATION,
    RETENTION,
    DueQueue,
    read_state,
)
from threadline.scheduling.state import MaintenanceState
from threadline.storage import SqliteStorage
from threadline.threads import delayed, message_rows, waits

#: The open submissions, for the owed native work: each Thread's head and its state.
_OPEN_WORK = (
    "SELECT id, thread_id, state, not_before, dormant FROM tl_submissions"
    " WHERE settled_at IS NULL ORDER BY thread_id, seq"
)
_BINDING_WAIT = "SELECT 1 AS x FROM tl_binding_waits WHERE submission_id = ?"
_FAULT = "SELECT 1 AS x FROM tl_recovery_faults WHERE thread_id = ?"
#: What the alarm invariant checks of each schedule: its next fire and its pending one.
_SCHEDULE_FIRES = "SELECT id, next_fire, pending_fire FROM tl_schedules ORDER BY id"


class QuiescenceError(AssertionError):
    """The object kept its alarm set for more passes than allowed: it never quiesces."""


class AlarmInvariantError(AssertionError):
    """A commit left due work without an alarm that fires in time."""


def alarm_invariant_problem(
    storage: SqliteStorage, app: Application, now: int, *, holds: Mapping[str, int] | None = None
) -> str | None:
    """What breaks the alarm invariant in ``storage`` at ``now``, or None when it holds.

    The invariant, outside a running alarm handler: if any lane is due, the alarm slot is set
    no later than ``max(earliest due, now + min_delay)``; a generation not yet processed
    has its native lane due; the delayed lane is due by the earliest delayed submission, the
    messages lane by the earliest pending message, and
    each schedule's lane by its next fire time (and its pending fire, if one is recorded), the
    native lane by the last timer of each head that sleeps on timers alone; with retention on,
    its lane is never idle. A
    lane whose waves were charged without progress may wait out its retry floor (a backoff
    or a parking) past those times, except a schedule's next fire, which nothing postpones
    once a fire is recorded. ``holds`` are
    the running incarnation's in-memory lane holds (:meth:`DueQueue.hold`, for a lane storage
    refuses to back off): a held lane's earliest due is the end of its hold.
    """
    queue = DueQueue(storage, app.config, random.Random(0))
    for lane_id, until in (holds or {}).items():
        queue.hold(lane_id, until)
    earliest = queue.next()
    slot = storage.known_alarm()
    if earliest is not None:
        bound = max(earliest, now + app.config.min_alarm_delay_ms)
        if slot is None or slot > bound:
            return f"a lane is due at {earliest} but the alarm slot is {slot} (bound {bound})"
    state = read_state(storage)
    native = queue.get(NATIVE)
    if state.processed < state.dirty and (native is None or native.due_at is None):
        return (
            f"generation {state.dirty} is not processed ({state.processed}) "
            "but the native lane is idle"
        )
    waiting = delayed.next_due(storage)
    if waiting is not None:
        problem = _lane_late(queue, DELAYED, waiting,
                             f"a delayed submission falls due at {waiting}")
        if problem is not None:
            return problem
    message_due = message_rows.next_due(storage)
    if message_due is not None:
        # A wave that delivered some messages and was lost before the rest leaves its lane due
        # at the crash fallback its progress set (within the backoff base of that progress).
        problem = _lane_late(queue, MESSAGES, message_due, f"a message is due at {message_due}",
                             lost_wave=now + app.config.alarm_backoff_base_ms)
        if problem is not None:
            return problem
    if app.config.retention_ms is not None:
        lane = queue.get(RETENTION)
        if lane is None or lane.due_at is None:
            return f"retention is on but lane {RETENTION!r} is idle"
    problem = _subscribers_late(storage, app, queue, state)
    if problem is None:
        problem = _native_work_late(storage, app, queue, state, now)
    if problem is None:
        problem = _timed_work_late(storage, app, queue, now)
    if problem is not None:
        return problem
    for row in storage.exec(_SCHEDULE_FIRES):
        schedule_id, next_fire = str(row["id"]), int(row["next_fire"])
        pending = row["pending_fire"]
        if pending is None:
            problem = _lane_late(queue, schedule_id, next_fire,
                                 f"schedule {schedule_id!r} fires next at {next_fire}")
        else:
            # A recorded fire is retried (after its backoff), but never past the next fire.
            problem = _lane_late(queue, schedule_id, int(pending),
                                 f"schedule {schedule_id!r} has its fire of {pending} pending",
                                 fixed=next_fire)
        if problem is not None:
            return problem
    return None


def _subscribers_late(
    storage: SqliteStorage, app: Application, queue: DueQueue, state: MaintenanceState
) -> str | None:
    """Why a declared subscriber that is not parked, with records it wants past its cursor,
    has no pass coming, or None: the publication lane is due (by its retry time after a
    failure), or the native lane is for a generation not processed yet (whose pass delivers
    too)."""
    if not len(app.subscribers):
        return None
    if state.processed < state.dirty:
        return None
    holds = read_holds(storage)
    for name, stored in publication_lane.read_rows(storage).items():
        spec = app.subscribers.get(name)
        if spec is None or stored.parked:
            continue
        lane = queue.get(PUBLICATION)
        # A Thread it is held on owes its records through the hold: due at the hold's retry.
        held = holds.get(name, {})
        for hold in held.values():
            if hold.parked:
                continue
            if lane is None or lane.due_at is None or (
                    hold.retry_at is not None and lane.due_at > int(hold.retry_at)):
                return (f"subscriber {name!r} retries thread {hold.thread_id!r} at "
                        f"{hold.retry_at} but lane {PUBLICATION!r} is due at "
                        f"{None if lane is None else lane.due_at}")
        past = {(str(row["thread_id"]), str(row["kind"]))
                for row in storage.exec(_KINDS_PAST, stored.cursor)}
        if not any(spec.wants(kind) for thread, kind in past if thread not in held):
            continue
        if lane is None or lane.due_at is None:
            return (f"subscriber {name!r} has records past its cursor but lane "
                    f"{PUBLICATION!r} is idle")
        if stored.retry_at is not None and lane.due_at > int(stored.retry_at):
            return (f"subscriber {name!r} retries at {stored.retry_at} but lane "
                    f"{PUBLICATION!r} is due at {lane.due_at}")
    return None


_KINDS_PAST = "SELECT DISTINCT thread_id, kind FROM tl_history WHERE pos > ?"


def _native_work_late(
    storage: SqliteStorage, app: Application, queue: DueQueue, state: MaintenanceState,
    now: int,
) -> str | None:
    """Why a Thread whose head can run now has no pass coming, or None. The head waits for
    nothing (not held behind a suspension, not parked on an unregistered agent, not under a
    recovery fault) but maybe a required subscriber: one parked (or parked on that Thread)
    holds it with no alarm; anything else must leave the native lane due."""
    if state.processed < state.dirty:
        return None  # the generation check covers it
    native = queue.get(NATIVE)
    if native is not None and native.due_at is not None:
        return None
    rows = publication_lane.read_rows(storage)
    holds = read_holds(storage)
    heads: dict[str, tuple[str, str, object, int]] = {}
    for row in storage.exec(_OPEN_WORK):
        thread = str(row["thread_id"])
        if thread not in heads and row["state"] not in ("unknown", "joined"):
            heads[thread] = (str(row["id"]), str(row["state"]), row["not_before"],
                             int(row["dormant"]))
    for thread, (head, head_state, not_before, dormant) in heads.items():
        if (head_state not in ("queued", "ready") or dormant
                or (not_before is not None and int(str(not_before)) > now)
                or storage.exec(_BINDING_WAIT, head).first() is not None
                or storage.exec(_FAULT, thread).first() is not None
                or _parked_gate(storage, app, thread, rows, holds)):
            continue
        return (f"thread {thread!r} owes native work (its head {head} is {head_state}) but "
                f"lane {NATIVE!r} is idle")
    return None


def _timed_work_late(
    storage: SqliteStorage, app: Application, queue: DueQueue, now: int
) -> str | None:
    """Why a Thread whose head waits for the clock alone has no pass coming by then, or None.

    A head suspended on timers only (``turn.sleep``, a ``RetryAfter`` waited on the timer)
    wakes when its last one is due: the native lane must be due by then (by the next alarm,
    once it fell due), unless it waits out its own retry floor, or the crash fallback a pass
    lost before its checkpoint set (within the backoff base). A head that also waits for
    someone (an approval, an Unknown Outcome) or is under a recovery fault is not the clock's.
    """
    heads: dict[str, tuple[str, str]] = {}
    for row in storage.exec(_OPEN_WORK):
        thread = str(row["thread_id"])
        if thread not in heads and row["state"] not in ("unknown", "joined"):
            heads[thread] = (str(row["id"]), str(row["state"]))
    for thread, (head, head_state) in heads.items():
        if head_state != "suspended" or storage.exec(_FAULT, thread).first() is not None:
            continue
        deadlines = waits.open_wait_deadlines(storage, head)
        wakes = [at for kind, at in deadlines if kind == "timer" and at is not None]
        if not wakes or len(wakes) < len(deadlines):
            continue  # it waits for someone, not for the clock alone
        due = max(wakes)
        problem = _lane_late(queue, NATIVE, max(due, now + app.config.min_alarm_delay_ms),
                             f"the head {head} of thread {thread!r} sleeps on timers until "
                             f"{due}", lost_wave=now + app.config.alarm_backoff_base_ms)
        if problem is not None:
            return problem
    return None


def _parked_gate(
    storage: SqliteStorage, app: Application, thread: str, rows: Mapping[str, SubscriberRow],
    holds: Mapping[str, Mapping[str, Hold]],
) -> bool:
    """Whether a declared required subscriber that is parked (or parked on ``thread``) has
    not consumed a record of ``thread`` it wants."""
    for spec in app.subscribers:
        row = rows.get(spec.name)
        if not spec.required or row is None:
            continue
        hold = holds.get(spec.name, {}).get(thread)
        if hold is not None:
            if hold.parked:
                return True
            continue
        if row.parked and wanted_past(storage, thread, row.cursor, spec.kinds):
            return True
    return False


def _lane_late(
    queue: DueQueue,
    lane_id: str,
    due: int,
    what: str,
    *,
    fixed: int | None = None,
    lost_wave: int | None = None,
) -> str | None:
    """Why ``lane_id`` is not due by ``due`` (and by ``fixed`` whatever its retries), or None.

    A lane whose waves were charged without progress (``stalls``: one failed, overran or was
    lost with the object) may wait out its retry floor (``not_before``: its backoff, or a
    parking's hourly retry) past ``due``; a healthy one may not. A held lane (storage refused
    to back it off) is not due before its hold ends anyway: only whether it is idle counts.
    ``lost_wave`` bounds the crash fallback of a wave that progressed before it was lost: a
    lane due by then is not late (its progress replenished it, so it shows no stall).
    """
    lane = queue.get(lane_id)
    if lane is None or lane.due_at is None:
        return f"{what} but lane {lane_id!r} is idle"
    if queue.held_until(lane_id) is not None:
        return None
    bound = due if lane.stalls == 0 else max(due, lane.not_before)
    if lost_wave is not None:
        bound = max(bound, lost_wave)
    if fixed is not None:
        bound = min(bound, fixed)
    if lane.due_at > bound:
        return f"{what} but lane {lane_id!r} is due at {lane.due_at} (bound {bound}): {lane}"
    return None


__all__ = ["AlarmInvariantError", "QuiescenceError", "alarm_invariant_problem"]
