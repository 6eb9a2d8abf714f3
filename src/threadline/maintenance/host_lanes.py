"""Host lanes: an application's own autonomous work on the object's one alarm.

A host lane is declared on the :class:`~threadline.Application`::

    @app.lane("digest", phase="after-native", dispatch_timeout=timedelta(seconds=30))
    async def digest(ctx: threadline.LaneContext) -> datetime | None:
        ...                      # a bounded piece of work
        return None              # idle until a producer wakes it (or: its next deadline)

A lane has no initial wave: it runs when it is due, and it becomes due when a producer wakes it
(an agent with :meth:`Turn.wake_lane`, committed with its Attempt's facts; the Worker with
:meth:`Space.wake_lane`) or when its own last wave returned a deadline that has come. Each wave
is bounded by the lane's allowance (``dispatch_timeout``, 1 ms to 300 s) on the injected clock;
an overrun is cancelled, given ``cancel_grace_ms`` to unwind (then abandoned), and counts as a
failed wave. A failed wave keeps its due revision and backs off on its own (``base * 2^stalls``,
jittered, capped), is never retried in the same event, and never fails the pass or cuts other
work short; after ``park_after_stalls`` waves without progress the lane is parked (retried
hourly, reported once). Delivery is at least once: a wave lost with the object runs again.

This module holds the declaration side (:class:`HostLanes`, checked at decoration time), the
handler's view (:class:`LaneContext`) and the adapter between the two clocks: handlers see aware
``datetime`` values, the due queue epoch milliseconds.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta

from threadline.clock import from_epoch_ms, to_epoch_ms
from threadline.environment import Environment
from threadline.errors import SchedulingError
from threadline.maintenance.lane_wave import Wave, current_wave
from threadline.maintenance.lanes import (
    MAX_DISPATCH_TIMEOUT_MS,
    MIN_DISPATCH_TIMEOUT_MS,
    LaneHandler,
    LanePhase,
)
from threadline.scheduling.due_queue import validate_host_lane_id
from threadline.storage.port import Storage

_MS = timedelta(milliseconds=1)
#: The default allowance of one wave.
DEFAULT_DISPATCH_TIMEOUT = timedelta(seconds=30)


class LaneContext:
    """What a host lane's handler gets for one wave.

    ``lane_id`` names the lane; ``now`` is when the wave started and ``deadline`` when its
    allowance ends (both aware UTC datetimes from the object's clock); the handler should
    return well before ``deadline``, with its next deadline or None. :meth:`progress` tells
    the runtime that the wave moved its work forward.
    """

    __slots__ = ("_storage", "_wave", "deadline", "env", "lane_id", "now")

    def __init__(
        self, lane_id: str, now: datetime, deadline: datetime, *, storage: Storage, wave: Wave,
        env: Environment | None = None,
    ) -> None:
        #: The Worker's environment, read-only (:class:`threadline.Environment`).
        self.env = env if env is not None else Environment()
        #: The lane this wave serves.
        self.lane_id = lane_id
        #: When the wave started (aware, UTC).
        self.now = now
        #: When the wave's allowance ends (aware, UTC); past it the handler is cancelled.
        self.deadline = deadline
        self._storage = storage
        self._wave = wave

    def progress(self) -> None:
        """Record that this wave moved the lane's work forward (a batch sent, an item done).

        A wave that reported progress never counts toward parking the lane, and if it fails
        afterwards it backs off from a fresh budget. Call it after each step of real work.
        Raises :class:`~threadline.SchedulingError` once the wave has ended (its handler ran
        past its allowance and was abandoned): nothing it does counts any more.
        """
        if self._storage.in_transaction():
            self._wave.progress()
        else:
            self._storage.transaction(self._wave.progress)

    def __repr__(self) -> str:
        return (f"LaneContext(lane_id={self.lane_id!r}, now={self.now.isoformat()}, "
                f"deadline={self.deadline.isoformat()})")


#: A host lane's handler: ``(ctx) -> next deadline (aware datetime) or None`` (sync or async).
LaneFn = Callable[[LaneContext], Awaitable[datetime | None] | datetime | None]


class HostLane:
    """One declared host lane: its id, phase, allowance and handler."""

    __slots__ = ("dispatch_timeout_ms", "fn", "id", "phase")

    def __init__(self, lane_id: str, fn: LaneFn, phase: LanePhase, dispatch_timeout_ms: int):
        self.id = lane_id
        self.fn = fn
        self.phase = phase
        self.dispatch_timeout_ms = dispatch_timeout_ms

    def __repr__(self) -> str:
        return (f"HostLane({self.id!r}, phase={self.phase.value!r}, "
                f"dispatch_timeout_ms={self.dispatch_timeout_ms})")


class HostLanes:
    """The host lanes an application declares, each checked as it is declared."""

    def __init__(self) -> None:
        self._lanes: dict[str, HostLane] = {}

    def check(
        self, lane_id: object, *, phase: object, dispatch_timeout: object
    ) -> tuple[str, LanePhase, int]:
        """Check a declaration; return its id, phase and allowance in whole milliseconds.

        Raises :class:`~threadline.SchedulingError` for an id that is not a host lane id
        (``[a-z0-9][a-z0-9._:-]{0,63}``, not under ``threadline:``), an id already declared,
        a phase other than ``"concurrent"`` or ``"after-native"``, or an allowance that is not
        a ``timedelta`` from 1 ms to 300 s (a fraction of a millisecond rounds up).
        """
        if not isinstance(lane_id, str):
            raise SchedulingError(f"a lane id is a string, got {type(lane_id).__name__}")
        validate_host_lane_id(lane_id)
        if lane_id in self._lanes:
            raise SchedulingError(f"lane {lane_id!r} is already declared")
        if not isinstance(phase, str) or phase not in tuple(LanePhase):
            raise SchedulingError(
                f"lane {lane_id!r}: phase must be 'concurrent' or 'after-native', got {phase!r}")
        checked_phase = LanePhase(phase)
        return lane_id, checked_phase, allowance_ms(f"lane {lane_id!r}", dispatch_timeout)

    def add(
        self,
        lane_id: str,
        fn: LaneFn,
        *,
        phase: LanePhase | str = LanePhase.CONCURRENT,
        dispatch_timeout: timedelta = DEFAULT_DISPATCH_TIMEOUT,
    ) -> HostLane:
        """Declare the lane ``lane_id`` served by ``fn``; see :meth:`check` for what is refused."""
        checked, checked_phase, timeout_ms = self.check(
            lane_id, phase=phase, dispatch_timeout=dispatch_timeout)
        if not callable(fn):
            raise SchedulingError(f"lane {checked!r}: the handler must be callable")
        lane = HostLane(checked, fn, checked_phase, timeout_ms)
        self._lanes[checked] = lane
        return lane

    def get(self, lane_id: str) -> HostLane | None:
        """The lane declared as ``lane_id``, or None."""
        return self._lanes.get(lane_id)

    @property
    def ids(self) -> frozenset[str]:
        """The declared ids."""
        return frozenset(self._lanes)

    def __iter__(self) -> Iterator[HostLane]:
        return iter(self._lanes.values())

    def __len__(self) -> int:
        return len(self._lanes)

    def __contains__(self, lane_id: object) -> bool:
        return lane_id in self._lanes


def allowance_ms(owner: str, dispatch_timeout: object) -> int:
    """``dispatch_timeout`` (a ``timedelta`` from 1 ms to 300 s) in whole milliseconds, a
    fraction of one rounded up; :class:`~threadline.SchedulingError` naming ``owner`` else."""
    if not isinstance(dispatch_timeout, timedelta):
        raise SchedulingError(
            f"{owner}: dispatch_timeout is a timedelta, got {type(dispatch_timeout).__name__}")
    if not (timedelta(milliseconds=MIN_DISPATCH_TIMEOUT_MS) <= dispatch_timeout
            <= timedelta(milliseconds=MAX_DISPATCH_TIMEOUT_MS)):
        raise SchedulingError(
            f"{owner}: dispatch_timeout must be from {MIN_DISPATCH_TIMEOUT_MS} ms "
            f"to {MAX_DISPATCH_TIMEOUT_MS // 1000} s, got {dispatch_timeout}")
    whole, part = divmod(dispatch_timeout, _MS)
    return whole + (1 if part else 0)


def epoch_ms(at: object, *, what: str) -> int:
    """``at`` (an aware ``datetime``) in epoch milliseconds, a fraction of one rounded up.

    Raises :class:`~threadline.SchedulingError` naming ``what`` for a naive datetime or
    anything else: a deadline without a time zone means nothing to the object's clock.
    """
    try:
        return to_epoch_ms(at)
    except (TypeError, ValueError) as exc:
        raise SchedulingError(f"{what}: {exc}") from None


#: The largest integer a JavaScript number holds exactly: the bound of an RPC cursor.
MAX_RPC_CURSOR = 2**53 - 1
#: The latest wake time an RPC may give (epoch ms): the last millisecond of year 9999.
MAX_RPC_WAKE_MS = (datetime.max.replace(tzinfo=UTC) - from_epoch_ms(0)) // _MS


def wake_arguments(
    lane_id: object, at_ms: object, cursor: object
) -> tuple[str, datetime | None, int | None]:
    """The Worker's ``wake_lane(id, at_ms, cursor)`` RPC arguments, checked and converted
    for :meth:`~threadline.space.Space.wake_lane`: the lane id, the wake time (None: now) and
    the cursor (None: none).

    They come from JavaScript, whose numbers are doubles: ``at_ms`` is None or a finite number
    of epoch milliseconds from 0 to the end of year 9999 (a fraction rounded up); ``cursor``
    is None or an integer from 0 to ``2**53 - 1`` (an integral double counts, as JavaScript
    cannot tell ``5`` from ``5.0``). Anything else (NaN, an infinity, ``5.5`` as a cursor, a
    cursor past ``2**53 - 1`` that JavaScript rounded, a bool, text) raises
    :class:`~threadline.SchedulingError` naming the argument: a wake is never silently
    made at another time or without its cursor. JavaScript's null and undefined are the
    caller's to turn into None.
    """
    if not isinstance(lane_id, str):
        raise SchedulingError(f"wake_lane: the lane id is a string, got {type(lane_id).__name__}")
    at = None
    if at_ms is not None:
        if (isinstance(at_ms, bool) or not isinstance(at_ms, int | float)
                or not math.isfinite(at_ms) or not 0 <= math.ceil(at_ms) <= MAX_RPC_WAKE_MS):
            raise SchedulingError(
                "wake_lane: at_ms is a finite number of epoch milliseconds from 0 to "
                f"{MAX_RPC_WAKE_MS}, or null for now; got {at_ms!r}")
        at = from_epoch_ms(math.ceil(at_ms))
    checked = None
    if cursor is not None:
        if (isinstance(cursor, bool) or not isinstance(cursor, int | float)
                or (isinstance(cursor, float) and not cursor.is_integer())
                or not 0 <= cursor <= MAX_RPC_CURSOR):
            raise SchedulingError(
                f"wake_lane: the cursor is an integer from 0 to {MAX_RPC_CURSOR}, or null for "
                f"none; got {cursor!r}")
        checked = int(cursor)
    return lane_id, at, checked


def handler_for(
    lane: HostLane, storage: Storage, env: Environment | None = None
) -> LaneHandler:
    """The lane runner's handler for ``lane``: builds its context, converts its deadline.

    A returned value that is neither None nor an aware datetime fails the wave with a
    :class:`~threadline.SchedulingError` saying so (charged and backed off like any failure).
    """

    async def run(now: int, deadline: int) -> int | None:
        wave = current_wave()
        if wave is None:
            raise SchedulingError(f"host lane {lane.id!r} runs only inside its wave")
        ctx = LaneContext(lane.id, from_epoch_ms(now), from_epoch_ms(deadline),
                          storage=storage, wave=wave, env=env)
        result = lane.fn(ctx)
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            return None
        return epoch_ms(result, what=f"the deadline host lane {lane.id!r} returned")

    return run


__all__ = [
    "DEFAULT_DISPATCH_TIMEOUT",
    "MAX_RPC_CURSOR",
    "MAX_RPC_WAKE_MS",
    "HostLane",
    "HostLanes",
    "LaneContext",
    "LaneFn",
    "LanePhase",
    "allowance_ms",
    "epoch_ms",
    "handler_for",
    "wake_arguments",
]
