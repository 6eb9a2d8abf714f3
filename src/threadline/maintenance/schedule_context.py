"""What a schedule's function gets for one run: :class:`ScheduleContext`.

The context carries the fire it serves (its time in the schedule's zone, the run's start and
deadline) and :meth:`ScheduleContext.submit`, which admits input at most once per fire. The
runner that builds one per run is :class:`~threadline.maintenance.schedule_lanes.ScheduleRunner`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, tzinfo

from threadline.clock import from_epoch_ms
from threadline.environment import Environment
from threadline.errors import SchedulingError
from threadline.maintenance.lane_wave import Wave
from threadline.schedules import CronSchedule, Schedule, fire_key
from threadline.storage.port import Storage
from threadline.threads import agent_choice
from threadline.threads.agents import AgentRegistry
from threadline.threads.ledger import Ledger
from threadline.threads.model import JsonValue

#: What a schedule's function may be: ``fn(ctx)``, sync or async; its result is ignored.
ScheduleFn = Callable[["ScheduleContext"], Awaitable[object] | object]


class ScheduleContext:
    """What a schedule's function gets for one run: the fire it serves and a way to submit.

    ``fire_time`` is the scheduled time of this fire (not now): an aware datetime in the
    schedule's time zone (UTC for an ``every`` schedule). It is the same in every run of the
    fire (one lost with the object, or retried after a failure), as are the default keys of
    :meth:`submit`, so a fire admits each of its submissions once. ``now`` is when this run
    started and ``deadline`` when its allowance ends (aware UTC datetimes from the object's
    clock).
    """

    __slots__ = ("_agents", "_ledger", "_storage", "_submitted", "_wave", "deadline", "env",
                 "fire_ms", "fire_time", "now", "schedule", "schedule_id")

    def __init__(
        self,
        schedule: Schedule,
        fire_ms: int,
        now: datetime,
        deadline: datetime,
        *,
        storage: Storage,
        ledger: Ledger,
        agents: AgentRegistry,
        wave: Wave,
        env: Environment | None = None,
    ) -> None:
        #: The Worker's environment, read-only (:class:`threadline.Environment`).
        self.env = env if env is not None else Environment()
        #: The schedule's id.
        self.schedule_id = schedule.id
        #: The declaration: an :class:`~threadline.schedules.EverySchedule` or a
        #: :class:`~threadline.schedules.CronSchedule`.
        self.schedule = schedule
        #: The fire time in epoch milliseconds.
        self.fire_ms = fire_ms
        #: The fire time, aware, in the schedule's time zone.
        self.fire_time = from_epoch_ms(fire_ms).astimezone(zone_of(schedule))
        #: When this run started (aware, UTC).
        self.now = now
        #: When this run's allowance ends (aware, UTC); past it the function is cancelled.
        self.deadline = deadline
        self._storage = storage
        self._ledger = ledger
        self._agents = agents
        self._wave = wave
        self._submitted = 0

    async def submit(
        self,
        thread: str,
        input: JsonValue,
        agent: str | None = None,
        key: str | None = None,
    ) -> str:
        """Admit ``input`` to ``thread`` of this space, at most once per fire; return its id.

        ``agent`` is chosen as the HTTP API chooses it: the one named, else the Thread's
        latest, else the only one registered. ``key`` is the idempotency key; without one,
        the ``n``-th submission of the run (from 0) gets
        :func:`~threadline.schedules.fire_key` of the schedule, the fire time and ``n``, so a
        run of the same fire (after a crash or a failure) admits nothing twice, provided it
        submits the same input in the same order: derive the input from ``ctx.fire_time``,
        never from the clock. A key used before with other input raises
        :class:`~threadline.Conflict`; ids and input are checked like the API's
        (:class:`~threadline.ValidationFailed`). Raises
        :class:`~threadline.SchedulingError` once the run has ended (it outran its allowance
        and was abandoned): nothing it submits then counts.
        """
        ordinal = self._submitted
        self._submitted += 1
        if self._wave.ended:
            raise SchedulingError(
                f"the run of schedule {self.schedule_id!r} has ended: it submits nothing more")
        if key is None:
            key = fire_key(self.schedule_id, self.fire_ms, ordinal)
        chosen = agent_choice.choose_agent(self._storage, self._agents, thread, agent, key)
        self._agents.check_input(chosen, input)
        return self._ledger.admit(thread, chosen, input, key).submission.id

    def __repr__(self) -> str:
        return (f"ScheduleContext(schedule_id={self.schedule_id!r}, "
                f"fire_time={self.fire_time.isoformat()})")


def zone_of(schedule: Schedule) -> tzinfo:
    return schedule.zone if isinstance(schedule, CronSchedule) else UTC


__all__ = ["ScheduleContext", "ScheduleFn", "zone_of"]
