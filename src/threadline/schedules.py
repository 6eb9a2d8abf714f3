"""Schedules: recurring work an application declares, as pure, validated values.

A schedule is a set of fire times in epoch milliseconds, of one of two kinds:

* :class:`EverySchedule` fires on a fixed grid, the multiples of its interval since the Unix
  epoch: every five minutes fires at :00, :05, :10 ... UTC, every 24 hours at 00:00 UTC. The grid
  depends on nothing stored, so neither a restart, nor a deploy, nor a next fire time stored under
  an older interval shifts it, and two fires are always at least one interval apart.
* :class:`CronSchedule` fires when a five-field cron expression matches the wall clock of its
  time zone (an IANA name, ``"UTC"`` by default), computed by ``cronsim`` over ``zoneinfo``.
  Across a daylight-saving change it behaves as ``cronsim`` documents, like Debian's cron: a job
  at a fixed time of day (minute and hour fields not starting with ``*``) whose time falls in
  the skipped hour fires at the first valid minute after the gap, and one whose time falls in
  the repeated hour fires once, at the first occurrence. Jobs with ``*`` in the minute or hour
  field follow real time: an hourly job fires at each real hour, so not in the skipped hour
  and twice in the repeated one.

Declarations are checked when they are made: the id like a host lane's, the interval within
bounds, the expression and the time zone. Each refusal is an
:class:`~threadline.errors.InvalidSchedule` then, never an error when the schedule would fire.

What a runner does with a schedule is decided here too, as pure functions of stored times:

* :meth:`due` coalesces: given the durable next fire time and now, the one run to make is the
  LATEST fire time between the two (never a burst after downtime, however many were missed),
  and the next fire is the first one after now.
* :meth:`next_after_run` keeps runs apart: the next fire after a run is the first fire strictly
  after the run ended, so fire times that passed while it ran are skipped, not queued behind it.
* :func:`fire_key` is the default idempotency key of what a run submits, derived from the
  schedule id and the fire time, so a run replayed after a crash admits nothing twice.

This module is pure: no clock, no storage, no platform. ``cronsim`` is imported on the first
cron declaration, so an application without one never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from threadline.errors import InvalidSchedule, SchedulingError
from threadline.scheduling.due_queue import validate_host_lane_id

if TYPE_CHECKING:
    from cronsim import CronSim

#: The shortest interval of an ``every`` schedule: each fire is an alarm of its object.
MIN_INTERVAL = timedelta(seconds=1)
#: The longest interval: 366 days, the bound of every durable delay in threadline (a
#: ``turn.sleep`` has the same one).
MAX_INTERVAL = timedelta(days=366)
#: The time zone of a cron schedule that names none.
DEFAULT_TZ = "UTC"
#: The largest ordinal :func:`fire_key` accepts: far more submissions than one run makes.
MAX_FIRE_ORDINAL = 999_999_999

_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The last millisecond a fire time can name (datetime ends with year 9999).
_LAST_MS = (datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC) - _EPOCH) // _MS
#: Where a new cron declaration is checked to fire at all: a fixed instant, not the clock, so
#: that a declaration is accepted or refused the same way on every run.
_PROBE_FROM = datetime(2000, 1, 1, tzinfo=UTC)
_CRON_FIELDS = "minute hour day-of-month month day-of-week"


def validate_schedule_id(schedule_id: str) -> str:
    """Return ``schedule_id`` if a schedule may use it, else raise :class:`InvalidSchedule`.

    A schedule id follows the host lane id rule: ``[a-z0-9][a-z0-9._:-]{0,63}``, without the
    reserved ``threadline:`` prefix.
    """
    try:
        return validate_host_lane_id(schedule_id)
    except SchedulingError as exc:
        raise InvalidSchedule(f"invalid schedule id: {exc.message}") from exc


@dataclass(frozen=True, slots=True)
class Due:
    """What a runner does at ``now`` with a schedule whose stored next fire time has come.

    ``fire_ms`` is the fire to run now (the latest one missed, at most ``now``), or None when
    there is none; ``next_ms`` is the next fire time to store, always after ``now``.
    """

    fire_ms: int | None
    next_ms: int


class _Fires:
    """What both kinds derive from their one primitive, :meth:`next_fire`."""

    __slots__ = ()

    def next_fire(self, after_ms: int) -> int:
        """The first fire time strictly after ``after_ms``, in epoch milliseconds."""
        raise NotImplementedError

    def latest_fire(self, since_ms: int, until_ms: int) -> int | None:
        """The latest fire time in ``[since_ms, until_ms]``, or None if there is none."""
        raise NotImplementedError

    def due(self, next_ms: int, now_ms: int) -> Due:
        """Coalesce the fires from the stored ``next_ms`` up to ``now_ms`` into one run.

        Before ``next_ms`` nothing is due. From then on the run is the latest fire time in
        ``[next_ms, now_ms]``: a month of downtime yields one run, with the last missed time.
        The fire to run may be None even though ``next_ms`` has passed, when ``next_ms`` is not
        a fire time of this declaration any more (a deploy changed it) and none of its own fire
        times has come since. The next fire time is the first one after ``now_ms``.
        """
        if now_ms < next_ms:
            return Due(None, next_ms)
        return Due(self.latest_fire(next_ms, now_ms), self.next_fire(now_ms))

    def next_after_run(self, fire_ms: int, ended_ms: int) -> int:
        """The next fire time after the run of ``fire_ms`` that ended at ``ended_ms``.

        It is the first fire strictly after both, so a schedule never overlaps itself and a
        run that outlasts its interval is not followed by runs of the times it outlasted.
        """
        return self.next_fire(max(fire_ms, ended_ms))


@dataclass(frozen=True, slots=True)
class EverySchedule(_Fires):
    """Fires every ``interval``, on the grid of its multiples since the Unix epoch.

    ``interval`` is a whole number of milliseconds from one second to 366 days. The grid is
    anchored at the epoch rather than at a start time, so the schedule has no phase to store
    and fires at the same times across restarts and deploys: every hour fires on the hour
    (UTC), every 7 days on Thursdays at 00:00 UTC (1970-01-01 was a Thursday).
    """

    id: str
    interval: timedelta
    kind: ClassVar[Literal["every"]] = "every"

    def __post_init__(self) -> None:
        validate_schedule_id(self.id)
        if not isinstance(self.interval, timedelta):
            raise InvalidSchedule(
                f"schedule {self.id!r}: the interval must be a timedelta, not "
                f"{type(self.interval).__name__}"
            )
        if not MIN_INTERVAL <= self.interval <= MAX_INTERVAL:
            raise InvalidSchedule(
                f"schedule {self.id!r}: the interval must be from 1 second to 366 days, not "
                f"{self.interval}"
            )
        if self.interval % _MS:
            raise InvalidSchedule(
                f"schedule {self.id!r}: the interval must be a whole number of milliseconds, "
                f"not {self.interval}"
            )

    @property
    def interval_ms(self) -> int:
        """The interval in milliseconds."""
        return self.interval // _MS

    @property
    def spec(self) -> str:
        """Stable text naming the fire times, e.g. ``every 300000ms``: equal specs, equal times."""
        return f"every {self.interval_ms}ms"

    def next_fire(self, after_ms: int) -> int:
        """The first multiple of the interval strictly after ``after_ms``."""
        step = self.interval_ms
        return (after_ms // step + 1) * step

    def latest_fire(self, since_ms: int, until_ms: int) -> int | None:
        """The last multiple of the interval in ``[since_ms, until_ms]``, or None."""
        fire = until_ms // self.interval_ms * self.interval_ms
        return fire if fire >= since_ms else None


@dataclass(frozen=True, slots=True)
class CronSchedule(_Fires):
    """Fires when the five-field cron ``expression`` matches the wall clock in ``tz``.

    Fields: minute, hour, day of month, month, day of week, with ``*``, lists, ranges, steps,
    month and day names (``JAN``, ``MON-FRI``), and cronsim's ``L``, ``LW`` and ``#``. The
    six-field form with seconds is refused: a schedule fires at most once a minute. ``tz`` is
    an IANA time zone name, resolved once into ``zone``; daylight-saving changes are handled as
    the module docstring says. The expression is stored with its fields separated by single
    spaces.
    """

    id: str
    expression: str
    tz: str = DEFAULT_TZ
    zone: tzinfo = field(init=False, repr=False, compare=False)
    kind: ClassVar[Literal["cron"]] = "cron"

    def __post_init__(self) -> None:
        validate_schedule_id(self.id)
        object.__setattr__(self, "zone", _zone(self.id, self.tz))
        object.__setattr__(self, "expression", _check_expression(self.id, self.expression,
                                                                 self.zone))

    @property
    def spec(self) -> str:
        """Stable text naming the fire times, e.g. ``cron 0 9 * * MON-FRI Europe/Paris``."""
        return f"cron {self.expression} {self.tz}"

    def next_fire(self, after_ms: int) -> int:
        """The first time strictly after ``after_ms`` at which the expression matches in ``tz``.

        Raises :class:`SchedulingError` when there is none before year 9999, or none within
        the 50 years cronsim searches.
        """
        try:
            start = (_EPOCH + timedelta(milliseconds=after_ms)).astimezone(self.zone)
            for when in _cron(self.expression, start):
                fire = (when - _EPOCH) // _MS
                # cronsim places a fixed-time job of the repeated autumn hour at its first
                # occurrence, which lies before a start taken in the second one.
                if fire > after_ms:
                    return fire
        except OverflowError:
            pass
        raise SchedulingError(
            f"schedule {self.id!r} ({self.spec}) has no fire time after {after_ms}"
        )

    def latest_fire(self, since_ms: int, until_ms: int) -> int | None:
        """The latest fire time in ``[since_ms, until_ms]``, or None.

        Found with :meth:`next_fire` alone, so it agrees with the forward sequence exactly
        (cronsim's reverse iteration reads the wall clock only, and from inside the repeated
        autumn hour misses that night's fire of a fixed-time job): one call when the
        window holds one fire, as on an alarm that came on time, and a bisection of the window
        otherwise (about 35 calls for a year of downtime, whatever the expression).
        """
        if until_ms < since_ms:
            return None
        first = self.next_fire(since_ms - 1)
        if first > until_ms:
            return None
        if self.next_fire(first) > until_ms:
            return first
        # Invariant: a fire lies in (low, until_ms], none lies in (high, until_ms].
        low, high = first, until_ms
        while high - low > 1:
            middle = (low + high) // 2
            if self.next_fire(middle) <= until_ms:
                low = middle
            else:
                high = middle
        return self.next_fire(low)


#: A declared schedule of either kind.
Schedule = EverySchedule | CronSchedule


def fire_key(schedule_id: str, fire_ms: int, ordinal: int = 0) -> str:
    """The default idempotency key of submission ``ordinal`` made by the run of one fire.

    ``schedule:<id>:<fire time, UTC, to the millisecond>``, followed by ``:<ordinal>`` for each
    submission of the run after its first (ordinal 0)::

        schedule:digest:2026-03-30T07:00:00.000Z      ordinal 0
        schedule:digest:2026-03-30T07:00:00.000Z:1    ordinal 1

    A key names one fire of one schedule: replaying the run after a crash makes the same keys,
    another fire or schedule never does (a schedule id has no capital letter, so the ``T`` of
    the time marks where the id ends). It is at most 108 characters of ``[A-Za-z0-9._:-]``,
    within the submission key limits.
    """
    validate_schedule_id(schedule_id)
    if isinstance(fire_ms, bool) or not isinstance(fire_ms, int) or not 0 <= fire_ms <= _LAST_MS:
        raise SchedulingError(f"fire time {fire_ms!r} is not an epoch millisecond before 10000")
    if isinstance(ordinal, bool) or not isinstance(ordinal, int) \
            or not 0 <= ordinal <= MAX_FIRE_ORDINAL:
        raise SchedulingError(f"fire ordinal {ordinal!r} is not from 0 to {MAX_FIRE_ORDINAL}")
    when = _EPOCH + timedelta(milliseconds=fire_ms)
    stamp = (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:{when.minute:02d}:"
        f"{when.second:02d}.{when.microsecond // 1000:03d}Z"
    )
    key = f"schedule:{schedule_id}:{stamp}"
    return key if ordinal == 0 else f"{key}:{ordinal}"


def _cron(expression: str, start: datetime) -> CronSim:
    # Imported here: an application that declares no cron schedule never loads cronsim.
    from cronsim import CronSim

    return CronSim(expression, start)


def _zone(schedule_id: str, tz: str) -> tzinfo:
    """The tzinfo of ``tz``; UTC needs no time zone data."""
    if not isinstance(tz, str):
        raise InvalidSchedule(
            f"schedule {schedule_id!r}: the time zone must be a string, not {type(tz).__name__}"
        )
    if tz == DEFAULT_TZ:
        return UTC
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        if not available_timezones():
            raise InvalidSchedule(
                f"schedule {schedule_id!r}: no time zone data in this runtime, so only "
                f"tz='UTC' is possible, not {tz!r} (install the tzdata package)"
            ) from exc
        raise InvalidSchedule(
            f"schedule {schedule_id!r}: unknown time zone {tz!r} (expected an IANA name such "
            f"as 'Europe/Paris')"
        ) from exc


def _check_expression(schedule_id: str, expression: str, zone: tzinfo) -> str:
    """``expression`` with single spaces, once cronsim parsed it and found a fire time."""
    from cronsim import CronSimError

    if not isinstance(expression, str):
        raise InvalidSchedule(
            f"schedule {schedule_id!r}: the cron expression must be a string, not "
            f"{type(expression).__name__}"
        )
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidSchedule(
            f"schedule {schedule_id!r}: cron expression {expression!r} has {len(fields)} "
            f"fields, expected 5 ({_CRON_FIELDS})"
        )
    normal = " ".join(fields)
    try:
        next(_cron(normal, _PROBE_FROM.astimezone(zone)))
    except (CronSimError, ValueError) as exc:
        raise InvalidSchedule(
            f"schedule {schedule_id!r}: invalid cron expression {expression!r}: {exc}"
        ) from exc
    except StopIteration:
        raise InvalidSchedule(
            f"schedule {schedule_id!r}: cron expression {expression!r} never fires"
        ) from None
    return normal


__all__ = [
    "DEFAULT_TZ",
    "MAX_FIRE_ORDINAL",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "CronSchedule",
    "Due",
    "EverySchedule",
    "Schedule",
    "fire_key",
    "validate_schedule_id",
]
