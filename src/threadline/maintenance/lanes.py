"""The lane runner: one bounded wave per due non-native lane.

A lane's handler is ``async handler(now, deadline) -> next_due | None``: it does a bounded
amount of work and returns when its lane is next due (None: idle). The runner

* never starts a wave whose whole allowance no longer fits before the event deadline: the
  lane stays due, uncharged, for the next event (a healthy wave is never cut short by the
  event and charged for it);
* claims the lane through the due queue first (compare-and-set, one attempt charged, the lane
  due again at the crash-fallback deadline should the object be lost mid-wave; after
  ``park_after_stalls`` claims without progress the lane is parked and reported once);
* runs the handler bounded by its dispatch timeout, measured on the injected clock; past it the
  handler is cancelled and given ``cancel_grace_ms`` to unwind, and one that ignores the
  cancellation is abandoned there, exactly like an agent: no handler can hold the pass;
* completes the lane with the returned deadline, unless a producer enrolled it meanwhile (its
  newer revision stays due) or a mutation that enrolled it is still in flight;
* backs a failure off (``now + backoff(stalls)``); the failure is logged with the lane and the
  error type only, and never fails the pass or blocks native work. A storage failure while
  claiming or completing the lane is that lane's failure too: a claim storage refused is
  charged again without running the handler (that charge is the backoff), and a completion it
  refused leaves the claim's own crash-fallback deadline, already backed off. When storage
  refuses that charge too, nothing about the lane can be written: the runner holds it in
  memory (:meth:`DueQueue.hold`) for ``backoff(stalls + refusals)``, growing with each
  refusal in a row, so the lane neither gets a wave nor arms the alarm before then.

**Progress.** A wave that moves work forward is never a stall. Code running inside a wave
reports each step of real work through :func:`current_wave`: :meth:`Wave.progress`, called in
the transaction that commits the step (an event acknowledged, a batch delivered), resets the
lane's stalls durably with it, so only a wave that moves nothing counts toward parking, and a
failure after progress backs off from a fresh budget. The runner counts the progress once that
transaction has committed; one rolled back moved nothing, and reset nothing either. Once its
wave has ended (returned, failed, or abandoned) a handler's progress is refused, which rolls
its transaction back: the code of an abandoned handler commits nothing through it.

**A fixed deadline.** A handler that knows before it does anything when its lane must run
next whatever happens (a schedule's next fire time) says so with :meth:`Wave.due_by`: a failed
or overrun wave is then due again no later than that, its backoff and a parking's hourly floor
notwithstanding. The lane still counts the stall, parks and is reported as any other.

A due lane without a registered handler fails the same way, loudly: it is claimed (charged,
backed off, eventually parked) and logged, so it can never make the alarm spin. A host lane a
deploy removed never gets that far: :meth:`LaneRunner.drop_removed` deletes its row at start-up.

**Phases.** A lane runs ``concurrent`` (its wave starts with the pass, beside native work) or
``after-native``: :meth:`LaneRunner.run_after_native` gives each due one a wave once every
native Attempt of the pass has joined, ``after_native_concurrency`` at a time, in the order of
the ids rotated after the durable ``last_after_native_lane`` cursor.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial

from threadline.abandonment import Abandoned
from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import SchedulingError, ThreadlineError
from threadline.maintenance.lane_wave import (
    Wave,
    WaveAbandoned,
    WaveTimedOut,
    bounded,
    current_wave,
    running,
)
from threadline.scheduling import (
    NATIVE,
    PUBLICATION,
    DueQueue,
    Lane,
    LaneState,
    MutationGate,
    backoff_ms,
)
from threadline.scheduling import state as generation
from threadline.scheduling.due_queue import RESERVED_PREFIX, validate_lane_id
from threadline.storage.port import Storage

_logger = logging.getLogger("threadline.maintenance")

#: A lane's work: ``(now, deadline) -> next due (epoch ms) or None when idle``.
LaneHandler = Callable[[int, int], Awaitable[int | None]]
#: The longest dispatch timeout a lane may declare (5 minutes).
MAX_DISPATCH_TIMEOUT_MS = 300_000
#: The shortest one (1 ms).
MIN_DISPATCH_TIMEOUT_MS = 1

# The host lanes' rows: every id outside the reserved prefix, read as two ranges of the
# primary key, so the framework's own lanes are not read.
_HOST_LANE_ROWS = (
    "SELECT id, due_at FROM tl_lanes WHERE id < ?"
    " UNION ALL SELECT id, due_at FROM tl_lanes WHERE id >= ?"
)
# Lanes the pass serves itself, never through a wave: native work, and subscriber delivery
# (threadline.maintenance.publication_lane), whose per-subscriber state is its own.
_PASS_DRIVEN = frozenset({NATIVE, PUBLICATION})
#: The least id above every id with the reserved prefix.
_AFTER_RESERVED = RESERVED_PREFIX[:-1] + chr(ord(RESERVED_PREFIX[-1]) + 1)


class LanePhase(StrEnum):
    """When a lane's wave runs within a pass."""

    #: With the pass's start, beside native work.
    CONCURRENT = "concurrent"
    #: Once every native Attempt of the pass has joined (even when native work failed).
    AFTER_NATIVE = "after-native"


class WaveOutcome(StrEnum):
    """How one lane wave ended."""

    COMPLETED = "completed"
    #: Someone else claimed or enrolled the lane first; nothing ran.
    STALE = "stale"
    FAILED = "failed"
    TIMED_OUT = "timed-out"
    UNHANDLED = "unhandled"
    #: Its allowance no longer fitted before the event deadline: not started, not charged,
    #: still due (the next event runs it).
    DEFERRED = "deferred"


@dataclass(frozen=True, slots=True)
class LaneSpec:
    """A registered lane: its handler and the bound of one wave."""

    id: str
    handler: LaneHandler
    dispatch_timeout_ms: int
    phase: LanePhase = LanePhase.CONCURRENT


@dataclass(frozen=True, slots=True)
class WaveResult:
    """One wave: its outcome, the charged lane when it was claimed, and whether it progressed."""

    lane_id: str
    outcome: WaveOutcome
    claimed: Lane | None = None
    progressed: bool = False

    @property
    def newly_parked(self) -> bool:
        """True when this wave's claim parked the lane and the parking is not reported yet.

        A wave that progressed ended the parking its claim began: nothing to report then.
        """
        claimed = self.claimed
        return (claimed is not None and claimed.state is LaneState.PARKED
                and not claimed.reported and not self.progressed)


class LaneRunner:
    """Runs waves of the non-native lanes of one object incarnation."""

    def __init__(
        self,
        storage: Storage,
        gate: MutationGate,
        due_queue: DueQueue,
        clock: Clock,
        config: RuntimeConfig,
        rng: random.Random,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._storage = storage
        self._gate = gate
        self._queue = due_queue
        self._clock = clock
        self._config = config
        self._rng = rng
        self._log = log if log is not None else _logger.error
        self._lanes: dict[str, LaneSpec] = {}
        self._abandoned = Abandoned()
        #: Claims in a row that storage refused to write at all, per lane (see the holds).
        self._refusals: dict[str, int] = {}

    def register(
        self,
        lane_id: str,
        handler: LaneHandler,
        *,
        dispatch_timeout_ms: int,
        phase: LanePhase = LanePhase.CONCURRENT,
    ) -> None:
        """Register the handler of ``lane_id``; a lane has one handler, native has none here."""
        validate_lane_id(lane_id)
        if lane_id == NATIVE:
            raise SchedulingError("the native lane is the maintenance pass itself")
        if lane_id in self._lanes:
            raise SchedulingError(f"lane {lane_id!r} already has a handler")
        if not MIN_DISPATCH_TIMEOUT_MS <= dispatch_timeout_ms <= MAX_DISPATCH_TIMEOUT_MS:
            raise SchedulingError(
                f"dispatch timeout of {lane_id!r} must be {MIN_DISPATCH_TIMEOUT_MS}.."
                f"{MAX_DISPATCH_TIMEOUT_MS} ms"
            )
        self._lanes[lane_id] = LaneSpec(lane_id, handler, dispatch_timeout_ms, LanePhase(phase))

    @property
    def registered(self) -> frozenset[str]:
        """The lanes with a handler."""
        return frozenset(self._lanes)

    @property
    def abandoned(self) -> int:
        """Handlers abandoned after a cancellation they ignored, still running."""
        return len(self._abandoned)

    def due(self, lanes: list[Lane], now: int) -> list[Lane]:
        """The concurrent lanes among ``lanes`` due at ``now`` and not held by a mutation
        (native and after-native lanes are not; a lane without a handler is concurrent)."""
        producing = self._gate.active_lanes()
        return [
            lane for lane in self.concurrent(lanes)
            if lane.due_at is not None and lane.due_at <= now and lane.id not in producing
        ]

    def concurrent(self, lanes: list[Lane]) -> list[Lane]:
        """The lanes among ``lanes`` whose waves run beside native work."""
        return [lane for lane in lanes
                if lane.id not in _PASS_DRIVEN and not self._after_native(lane.id)]

    @property
    def has_after_native(self) -> bool:
        """Whether some registered lane runs after native work."""
        return any(spec.phase is LanePhase.AFTER_NATIVE for spec in self._lanes.values())

    def _after_native(self, lane_id: str) -> bool:
        spec = self._lanes.get(lane_id)
        return spec is not None and spec.phase is LanePhase.AFTER_NATIVE

    def drop_removed(self) -> list[str]:
        """At start-up: delete the rows of host lanes with no handler here; return their ids.

        A host lane whose handler a deploy removed would otherwise be claimed, backed off and
        parked forever; its row is dropped instead, with one log line. Framework lanes
        (the reserved prefix) are kept, handled or not: their work is the framework's own.
        Reads only the host lanes' rows.
        """

        def drop() -> list[tuple[str, int | None]]:
            rows = self._storage.exec(_HOST_LANE_ROWS, RESERVED_PREFIX, _AFTER_RESERVED)
            removed = [(str(row["id"]), row["due_at"]) for row in rows
                       if str(row["id"]) not in self._lanes]
            for lane_id, _ in removed:
                self._queue.drop(lane_id)
            return removed

        removed = self._storage.transaction(drop)
        for lane_id, due_at in removed:
            state = "idle" if due_at is None else f"due at {due_at}"
            self._log(
                f"threadline: host lane {lane_id!r} has no handler in this deployment; "
                f"dropped ({state})"
            )
        return [lane_id for lane_id, _ in removed]

    def allowance_ms(self, lane_id: str) -> int | None:
        """The allowance of one wave of ``lane_id`` (None: no handler): its dispatch timeout,
        never more than a whole event (``event_deadline_ms``)."""
        spec = self._lanes.get(lane_id)
        return None if spec is None else self._allowance(spec)

    def _allowance(self, spec: LaneSpec) -> int:
        return min(spec.dispatch_timeout_ms, self._config.event_deadline_ms)

    def fits(self, lane_id: str, now: int, until: int | None) -> bool:
        """Whether a wave of ``lane_id`` started at ``now`` ends, allowance and all, by
        ``until`` (the event deadline; None: no bound). A lane without a handler fits: its
        claim is charged at once, and nothing runs."""
        allowance = self.allowance_ms(lane_id)
        return until is None or allowance is None or now + allowance <= until

    async def run_wave(
        self, lane: Lane, *, until: int | None = None, selected_at: int | None = None
    ) -> WaveResult:
        """Claim ``lane`` (a snapshot) and run one wave of it; see the module docstring.

        ``until`` (epoch ms) is the pass's own event deadline. A wave whose whole allowance
        (see :meth:`allowance_ms`) no longer fits before it, counted from ``selected_at``
        (when the pass chose the lane; default now), is not started: the lane stays due,
        uncharged, for the next event (:attr:`WaveOutcome.DEFERRED`), so a healthy handler is
        never cut short at the deadline and charged for it. A wave selected at the start of a
        pass always fits; its deadline never passes ``until`` all the same. It never raises
        for the lane's own failure, storage's included: only the loss of the object, a stop
        of the host, or a cancellation from outside leave it.
        """
        now = self._clock.now_ms()
        if not self.fits(lane.id, now if selected_at is None else selected_at, until):
            return WaveResult(lane.id, WaveOutcome.DEFERRED)
        try:
            claimed = self._storage.transaction(lambda: self._queue.claim(lane, now))
        except ThreadlineError as exc:
            return self._claim_refused(lane, exc)
        self._written(lane.id)
        if claimed is None:
            return WaveResult(lane.id, WaveOutcome.STALE)
        spec = self._lanes.get(lane.id)
        if spec is None:
            self._log(
                f"threadline: maintenance lane {lane.id!r} is due but has no registered handler; "
                f"backing off (stalls={claimed.stalls}, state={claimed.state.value})"
            )
            return WaveResult(lane.id, WaveOutcome.UNHANDLED, claimed)
        deadline = now + self._allowance(spec)
        if until is not None:
            # Only ever the time between the pass's choice and now.
            deadline = min(deadline, until)
        wave = Wave(lane.id, self._storage, self._queue, self._clock, self._config,
                    claimed=claimed)
        try:
            with running(wave):
                next_due = await bounded(partial(spec.handler, now, deadline), deadline,
                                         clock=self._clock, abandoned=self._abandoned,
                                         config=self._config)
        except WaveAbandoned:
            self._log(
                f"threadline: maintenance lane {lane.id!r} ran past its dispatch timeout and "
                f"ignored its cancellation for cancel_grace_ms ({self._config.cancel_grace_ms});"
                " abandoned"
            )
            return self._failed(claimed, wave, WaveOutcome.TIMED_OUT)
        except WaveTimedOut:
            self._log(f"threadline: maintenance lane {lane.id!r} ran past its dispatch timeout")
            return self._failed(claimed, wave, WaveOutcome.TIMED_OUT)
        except Exception as exc:  # a lane's failure is charged, never fatal
            # Only the error type: a handler's message may carry its data. The library's own
            # refusals (a naive deadline returned, say) name a contract, so they are shown.
            cause = type(exc).__name__
            if isinstance(exc, SchedulingError):
                cause = f"{cause}: {exc.message}"
            self._log(
                f"threadline: maintenance lane {lane.id!r} failed ({cause}); "
                f"backing off (stalls={0 if wave.progressed else claimed.stalls})"
            )
            return self._failed(claimed, wave, WaveOutcome.FAILED)
        self._complete(claimed, next_due)
        return WaveResult(lane.id, WaveOutcome.COMPLETED, claimed, wave.progressed)

    async def run_after_native(
        self,
        until: int,
        *,
        snapshot: list[Lane] | None = None,
        exclude: frozenset[str] = frozenset(),
    ) -> list[WaveResult]:
        """Give each due after-native lane one wave; call it once native work has joined.

        The lanes are those of ``snapshot`` (the rows the pass read at its begin, when no lane
        was enrolled since) or else of the due queue read now; those due, not held by a
        mutation and not in ``exclude`` run ``after_native_concurrency`` at a time, in id
        order rotated after the ``last_after_native_lane`` cursor. While some of them wait
        for a free slot, each admission is recorded in the cursor before its wave starts, so a
        deadline or a lost object favours the others next time (when all start at once nobody
        waits behind them, and no row is written). A lane whose whole allowance no longer
        fits before ``until`` (the event deadline) is not started: it stays due, uncharged,
        for the next event. Never raises for storage: a read it refuses leaves the lanes due.
        """
        if not self.has_after_native:
            return []
        now = self._clock.now_ms()
        try:
            lanes = snapshot if snapshot is not None else self._queue.due(now)
        except ThreadlineError as exc:
            self._log(f"threadline: could not read the after-native lanes ({type(exc).__name__})")
            return []
        producing = self._gate.active_lanes()
        ready = {
            lane.id: lane for lane in lanes
            if self._after_native(lane.id) and lane.due_at is not None and lane.due_at <= now
            and lane.id not in producing and lane.id not in exclude
        }
        if not ready:
            return []
        order = sorted(ready)
        cursor = self._after_native_cursor()
        pivot = next((i for i, lane_id in enumerate(order)
                      if cursor is None or lane_id > cursor), 0)
        rotated = order[pivot:] + order[:pivot]
        slots = min(self._config.after_native_concurrency, len(rotated))
        durable = len(rotated) > slots
        pending = iter(rotated)
        results: list[WaveResult] = []

        async def admit() -> None:
            # Each slot takes the next lane as soon as its previous wave ended.
            for lane_id in pending:
                if not self.fits(lane_id, self._clock.now_ms(), until):
                    continue
                if durable:
                    self._set_after_native_cursor(lane_id)
                results.append(await self.run_wave(ready[lane_id], until=until))

        workers = [asyncio.ensure_future(admit()) for _ in range(slots)]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
        return results

    def _after_native_cursor(self) -> str | None:
        try:
            return generation.read_state(self._storage).last_after_native_lane
        except ThreadlineError as exc:
            # The rotation is fairness, not safety: start at the front this time.
            self._log(f"threadline: could not read last_after_native_lane ({type(exc).__name__})")
            return None

    def _set_after_native_cursor(self, lane_id: str) -> None:
        try:
            self._storage.transaction(lambda: generation.set_cursor(
                self._storage, "last_after_native_lane", lane_id))
        except ThreadlineError as exc:
            self._log(f"threadline: could not record last_after_native_lane ({type(exc).__name__})")

    def _claim_refused(self, lane: Lane, exc: ThreadlineError) -> WaveResult:
        """Storage refused the claim, so nothing was charged: charge it once more without
        running the handler, which moves the lane to its backoff (and toward parking)."""
        self._log(
            f"threadline: maintenance lane {lane.id!r} could not be claimed "
            f"({type(exc).__name__}); backing off"
        )
        now = self._clock.now_ms()
        try:
            charged = self._storage.transaction(lambda: self._queue.claim(lane, now))
        except ThreadlineError as again:
            # Storage refuses every write: the lane stays due as it was. Held in memory, so
            # that it does not come back at every minimum delay; each refusal in a row counts
            # as the stall it could not record.
            refusals = self._refusals.get(lane.id, 0) + 1
            self._refusals[lane.id] = refusals
            until = now + backoff_ms(lane.stalls + refusals, self._config, self._rng)
            self._queue.hold(lane.id, until)
            self._log(
                f"threadline: maintenance lane {lane.id!r} could not be backed off "
                f"({type(again).__name__}); held until {until} (refusals={refusals})"
            )
            charged = None
        else:
            self._written(lane.id)
        return WaveResult(lane.id, WaveOutcome.FAILED, charged)

    def _written(self, lane_id: str) -> None:
        """Storage wrote the lane's claim (or found it stale): its durable row governs again."""
        if self._refusals.pop(lane_id, None) is not None:
            self._queue.release(lane_id)

    def _failed(self, claimed: Lane, wave: Wave, outcome: WaveOutcome) -> WaveResult:
        # Progress in the wave reset its stalls: the retry backs off from a fresh budget.
        stalls = 0 if wave.progressed else claimed.stalls
        due = self._clock.now_ms() + backoff_ms(stalls, self._config, self._rng)
        self._finish(claimed, due, wave.due_by_ms)
        return WaveResult(claimed.id, outcome, claimed, wave.progressed)

    def _complete(self, claimed: Lane, next_due: int | None) -> None:
        # A mutation that enrolled this lane is still in flight: its facts are not committed
        # yet, so the wave cannot have seen them. Keep the claim's fallback deadline.
        with self._gate.snapshot():
            if claimed.id in self._gate.active_lanes():
                return
            self._finish(claimed, next_due)

    def _finish(self, claimed: Lane, next_due: int | None, due_by: int | None = None) -> None:
        def finish() -> None:
            self._queue.complete(claimed, next_due)
            if due_by is not None:
                # The wave's own fixed deadline beats its backoff and a parking's floor.
                self._queue.bring_forward(claimed.id, due_by)

        try:
            self._storage.transaction(finish)
        except ThreadlineError as exc:
            # The claim's crash-fallback deadline stands: the lane is retried after a backoff.
            self._log(
                f"threadline: maintenance lane {claimed.id!r} could not be completed "
                f"({type(exc).__name__}); retried at its fallback deadline"
            )


__all__ = [
    "MAX_DISPATCH_TIMEOUT_MS",
    "MIN_DISPATCH_TIMEOUT_MS",
    "LaneHandler",
    "LanePhase",
    "LaneRunner",
    "LaneSpec",
    "Wave",
    "WaveOutcome",
    "WaveResult",
    "current_wave",
]
