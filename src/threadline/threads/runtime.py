"""The durable agent runtime: one Attempt at a Thread's head, settled exactly once.

``process_thread_head(thread)`` claims the Thread's head submission under a lease (its
deadline stands on the native lane, so a lost Attempt is found by the alarm), runs the agent
with a :class:`~threadline.threads.turn.Turn`, and ends the Attempt in exactly one of these
ways, each one compare-and-set on the claimed revision:

* the agent returned: settle ``completed`` (``aborted`` if an abort was accepted meanwhile);
* it waits (approval, timer): ``suspended``, its wait durable;
* it raised: ready again after a backoff, or ``failed`` once ``max_attempts`` is spent or the
  error is :class:`~threadline.errors.NonRetryable` or ``ValidationFailed`` (a refused
  argument or value: a retry would be refused again); a foreign ``BaseException``
  (``SystemExit`` and ``KeyboardInterrupt`` included) is handled like any exception;
* it ran past ``attempt_timeout_ms``: cancelled, then handled like a lost Attempt (an agent
  that swallows the cancellation is abandoned after ``cancel_grace_ms``; its Turn is revoked
  and the claim's revision moves on, so nothing it does later commits);
* it ended (raised, waited, timed out, or even returned) while an ``uncertain`` step was in
  flight, its result never journaled: an Unknown Outcome, never a second run of that step;
* it observed an accepted abort, or one was accepted before it ended: settle ``aborted``;
* the pass's yield deadline passed at a step boundary: ready again, the attempt refunded.

If the object is lost mid-Attempt none of that happens; recovery decides later from the claim,
the journal and the abort intent (:mod:`threadline.threads.recovery`). Such a lost Attempt is
not the agent's failure: it spends no ``max_attempts`` (:mod:`threadline.threads.losses`).

Each claim is stamped with this runtime's incarnation id (``<incarnation>/<lease id>`` in
``lease_owner``), and the runtime keeps the Threads whose Attempt it is running in memory. A
Durable Object runs one incarnation at a time, so recovery can tell a claim that is really in
flight (this incarnation, Thread active) from one that was lost (any other claim) without
waiting for its lease to expire.

Storage failures. Before a claim is taken, a storage failure propagates: nothing is held and
the caller records the fault. Once a claim is held, none escapes ``process_thread_head``: the
end of the Attempt is written with its real cause, and an end storage refuses is tried once
more. A refused result falls back to failing the Attempt with the refusal as its reason (final
when the value is too large); a refused error envelope (small, its message cut) or a refused
release, suspension or Unknown Outcome is written again as it was. If storage refuses that as
well, nothing is written and ``process_thread_head`` returns None: the claim stays running and
the cause is held in memory (:meth:`Recovery.hold`). The Thread is no longer active, so the
next recovery sweep of the Thread ends the claim at once, with that cause (``failed`` at once
when the cause is final, else ready again after the backoff). The held cause lives as long as
this incarnation: after an eviction the next incarnation finds the claim stamped by another
one and reports the Attempt lost to a reset (``AttemptLost``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Set
from functools import partial
from typing import Any, TypeVar

from threadline.abandonment import Abandoned, ExitRaised, contained
from threadline.clock import Clock
from threadline.clock import timer as clock_timer
from threadline.config import RuntimeConfig
from threadline.environment import Environment
from threadline.errors import (
    AttemptTimeout,
    Evicted,
    NonRetryable,
    RetryAfter,
    StorageError,
    ValidationFailed,
)
from threadline.fetching import FetchPort
from threadline.ids import IdSource
from threadline.scheduling import backoff_ms
from threadline.storage.port import Storage
from threadline.threads import history, journal, transitions, waits
from threadline.threads.abort_watch import AbortRead, AbortWatch
from threadline.threads.agents import AgentBinding, AgentRegistry, binding_registry_key
from threadline.threads.attempt_errors import (
    UNFIXABLE,
    AgentCancelled,
    StepLeftInFlight,
    commit_twice,
    final_failure,
    refusal_as_failure,
)
from threadline.threads.failure_log import FailureLog
from threadline.threads.ledger import Ledger
from threadline.threads.live_text import LiveStreams
from threadline.threads.model import (
    CLAIMABLE,
    AbortState,
    JsonValue,
    Outcome,
    Settlement,
    Submission,
    SubmissionState,
    WaitKind,
    WorkItem,
    decode_json,
    encode_json,
    error_envelope,
)
from threadline.threads.ports import (
    NATIVE,
    PUBLICATION,
    Failpoints,
    MutationGate,
    commit_fact,
)
from threadline.threads.records import APPROVAL_REQUESTED
from threadline.threads.recovery import (
    Recovery,
    RecoverySweepResult,
    UnwrittenEnd,
    park_unknown,
)
from threadline.threads.signals import AbortObserved, ControlSignal, LeaseLost, Suspend, YieldNow
from threadline.threads.turn import Turn
from threadline.threads.turn_base import PROPAGATES, Claim

T = TypeVar("T")

ATTEMPT_CLAIMED = "attempt:claimed"
SETTLE_BEFORE = "settle:before"
SETTLE_AFTER = "settle:after"


class ThreadRuntime:
    """Runs the Threads of one object. One instance per incarnation; it holds no durable state."""

    def __init__(
        self,
        storage: Storage,
        registry: AgentRegistry,
        *,
        gate: MutationGate,
        failpoints: Failpoints,
        config: RuntimeConfig,
        clock: Clock,
        rng: random.Random,
        ids: IdSource,
        incarnation: str | None = None,
        host_lanes: Set[str] = frozenset(),
        env: Environment | None = None,
        fetch: FetchPort | None = None,
    ) -> None:
        #: Names this runtime's claims; a fresh id per object incarnation.
        self.incarnation = incarnation if incarnation is not None else ids.new_id("inc")
        if "/" in self.incarnation:
            raise ValueError("an incarnation id must not contain '/'")
        self._active: set[str] = set()
        self.storage = storage
        self.registry = registry
        self.gate = gate
        self.failpoints = failpoints
        self.config = config
        self.clock = clock
        self.rng = rng
        self.ids = ids
        #: The host lanes agents may wake (:meth:`Turn.wake_lane`).
        self.host_lanes = frozenset(host_lanes)
        #: The Worker's environment agents read (:attr:`Turn.env`).
        self.env = env if env is not None else Environment()
        #: The outbound port agents' ``turn.http`` sends through (None: it refuses).
        self.fetch = fetch
        #: The text agents stream right now (``turn.stream``), for the Thread's readers.
        self.live = LiveStreams()
        #: Logs each failed Attempt, and counts them for the pass reports.
        self.failures = FailureLog()
        #: Aborts requested in this incarnation (see :mod:`threadline.threads.abort_watch`).
        self.aborts = AbortWatch()
        self.ledger = Ledger(storage, gate, clock=clock, ids=ids, config=config,
                             aborts=self.aborts)
        self.recovery = Recovery(self.ledger, incarnation=self.incarnation, active=self._active)
        # Agents that ignored a cancellation; referenced so they are not collected mid-run.
        self._abandoned = Abandoned()

    @property
    def binding_registry_key(self) -> str:
        """Stable hash of the agents this deployment registers (names and versions)."""
        return binding_registry_key(self.registry)

    @property
    def active_threads(self) -> Set[str]:
        """Threads whose Attempt this incarnation is running right now (a live view)."""
        return self._active

    def run_recovery(self, thread_id: str) -> RecoverySweepResult:
        """Recover one Thread after lost Attempts; see :mod:`threadline.threads.recovery`.

        A Thread whose Attempt this incarnation is running is left untouched, whatever its
        lease says: a long model call must not get a second, concurrent Attempt.
        """
        return self.recovery.run(thread_id)

    def head(self, thread_id: str) -> WorkItem | None:
        """The Thread's head: its first open submission that is not parked as Unknown.

        An Unknown Outcome steps aside so later input is not held hostage by an operator
        decision; every other state, including a suspension, keeps FIFO order.
        """
        return _head_of(self.ledger.thread_open(thread_id))

    async def process_thread_head(
        self, thread_id: str, *, yield_after: int | None = None
    ) -> Settlement | None:
        """Run one Attempt of the Thread's head; return its settlement if it settled.

        Returns None without writing when there is nothing to run now: the head is waiting,
        backing off, already running, or ``yield_after`` (epoch ms) has passed. An agent this
        deployment does not register raises :class:`~threadline.errors.BindingUnavailable`
        before anything is claimed, so the submission stays exactly as it was. While it runs,
        the Thread is in :attr:`active_threads`; a second call for the same Thread meanwhile
        returns None.
        """
        now = self.clock.now_ms()
        if yield_after is not None and now >= yield_after:
            return None
        if thread_id in self._active:
            return None
        self._active.add(thread_id)
        try:
            return await self._process_head(thread_id, now, yield_after)
        finally:
            self._active.discard(thread_id)

    async def _process_head(
        self, thread_id: str, now: int, yield_after: int | None
    ) -> Settlement | None:
        items = self.ledger.thread_open(thread_id)
        # One active head per Thread; an expired lease is recovery's to decide, not ours.
        if any(item.state is SubmissionState.RUNNING for item in items):
            return None
        head = _head_of(items)
        if head is None:
            return None
        if head.state is SubmissionState.TERMINALIZING:
            reason = transitions.accepted_abort(self.storage, head.submission_id)
            return self._settle_open(head, Outcome.ABORTED,
                                     error=reason or transitions.aborted_error(None))
        if head.state not in CLAIMABLE or (head.not_before or 0) > now:
            return None
        binding = self.registry.resolve(head.agent)
        try:
            claim = self._claim(head)
        except ValidationFailed as exc:
            # Its stored input cannot be read (nested beyond what the decoder accepts): no
            # Attempt could ever run it, so it fails now instead of holding its Thread.
            failure = NonRetryable(f"the input cannot be read: {exc.message}")
            return self._settle_open(head, Outcome.FAILED,
                                     error=error_envelope(failure, attempt=head.attempts + 1))
        if claim is None:
            return None
        await self.failpoints.reached(ATTEMPT_CLAIMED)
        return await self._attempt(claim, binding, yield_after)

    # -- one Attempt -------------------------------------------------------------------------

    def _claim(self, head: WorkItem) -> Claim | None:
        now = self.clock.now_ms()
        lease_owner = lease_owner_of(self.incarnation, self.ids.new_id("lease"))
        deadline = now + self.config.lease_ms

        def write() -> Claim | None:
            claimed = transitions.claim(self.storage, head.submission_id, state=head.state,
                                        revision=head.revision, lease_owner=lease_owner,
                                        lease_expires_at=deadline, now=now)
            if claimed is None:
                return None
            # The crash fallback: if this Attempt is lost, the alarm finds the expired lease.
            self.gate.schedule(NATIVE, deadline)
            abort = AbortRead(self.aborts.count,
                              claimed["abort_state"] == AbortState.ACCEPTED.value)
            return Claim(Submission.from_row(claimed), lease_owner, head.revision + 1, abort)

        return self.gate.mutate(write, invalidates_recovery=False)

    async def _attempt(
        self, claim: Claim, binding: AgentBinding, yield_after: int | None
    ) -> Settlement | None:
        deadline = self.clock.now_ms() + self.config.attempt_timeout_ms
        turn = Turn(claim, storage=self.storage, gate=self.gate, clock=self.clock,
                    failpoints=self.failpoints, yield_after=yield_after, config=self.config,
                    deadline=deadline, host_lanes=self.host_lanes, agents=self.registry,
                    join_followups=binding.join_followups, aborts=self.aborts, env=self.env,
                    fetch=self.fetch, live=self.live, parse_input=binding.parse_input
                    if binding.input_model is not None else None)
        try:
            value = await self._bounded(partial(binding.fn, turn), deadline, turn)
        except LeaseLost:
            return None
        except PROPAGATES as exc:
            if isinstance(exc, ControlSignal):
                return await self._ended(claim, exc)
            raise
        except BaseException as exc:
            # Any other exception, a foreign BaseException too (GeneratorExit, a custom
            # subclass, an exit the agent's task carried out), fails the Attempt with its type
            # and message; letting it escape would leave the claim to expire and lose both.
            return await self._ended(claim, exc.raised if isinstance(exc, ExitRaised) else exc)
        if turn.has_step_in_flight:
            # It returned past an uncertain step whose result was never journaled (it caught
            # the failed write): that step's outcome is for an operator to decide, not lost.
            return await self._ended(claim, StepLeftInFlight())
        try:
            result_json = encode_json(value, field="result", max_depth=self.config.max_json_depth,
                                      max_bytes=self.config.max_value_bytes)
        except ValidationFailed as exc:
            return await self._ended(claim, NonRetryable(exc.message))
        return await self._settle(claim, Outcome.COMPLETED, result_json=result_json)

    async def _bounded(self, work: Callable[[], Awaitable[Any]], deadline: int, turn: Turn) -> Any:
        """Await the agent, cancelling it once the clock reaches ``deadline``.

        The bound is read from the injected clock, so it holds on the platform's timers and
        in tests alike. A cancellation from outside (the pass's event deadline) cancels the
        agent, lets it unwind, and propagates without writing anything: the claim is left
        running for recovery to find. Either way the agent gets ``cancel_grace_ms`` to unwind;
        one that swallows the cancellation is abandoned after that, like a lost Attempt. When
        this returns or raises, ``turn`` is revoked: nothing the agent's code does later (an
        abandoned task, or one it spawned) can write.
        """
        agent = asyncio.ensure_future(contained(work))
        timer = clock_timer(self.clock, deadline)
        try:
            try:
                await asyncio.wait((agent, timer), return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                await self._stop(agent)
                raise
            if agent.done():
                if agent.cancelled():
                    # Nobody cancelled this Attempt (that would have raised from the wait
                    # above): the agent's own code let a CancelledError out. It fails this
                    # Attempt only; propagating it would cancel the whole pass.
                    raise AgentCancelled()
                return agent.result()
            if not await self._stop(agent):
                raise AttemptTimeout(
                    f"the Attempt ran longer than attempt_timeout_ms"
                    f" ({self.config.attempt_timeout_ms}) and did not stop within"
                    f" cancel_grace_ms ({self.config.cancel_grace_ms}) of being cancelled"
                )
            unwound = None if agent.cancelled() else agent.exception()
            if isinstance(unwound, Evicted):
                raise unwound
            raise AttemptTimeout(
                f"the Attempt ran longer than attempt_timeout_ms ({self.config.attempt_timeout_ms})"
            )
        finally:
            timer.cancel()
            turn.revoke()

    async def _stop(self, agent: asyncio.Future[Any]) -> bool:
        """Cancel the agent and wait up to ``cancel_grace_ms`` for it to end; True when it did.

        One that ignores the cancellation is abandoned (:class:`Abandoned`); its Turn is revoked
        and its claim ended or left to recovery by the caller, so nothing it does later commits.
        A cancellation of this wait (the pass's event deadline arriving during a timeout's
        grace) cuts the grace short and abandons the agent all the same.
        """
        return await self._abandoned.stop(agent, self.clock, self.config.cancel_grace_ms)

    @property
    def abandoned(self) -> int:
        """Agents abandoned after a cancellation they ignored, still running."""
        return len(self._abandoned)

    async def _ended(self, claim: Claim, exc: BaseException) -> Settlement | None:
        """End an Attempt the agent left by raising ``exc``.

        Ending is a step boundary too: an abort accepted while the agent ran (after its last
        boundary, or while it unwound through ``finally`` blocks that await) settles the
        submission aborted with its reason, rather than parking it behind a wait or a retry.
        From the check to the commit nothing awaits, so no abort can slip in between. Every
        end that leaves the submission open first looks for an uncertain step still in
        flight: once one started, the only ways on are its journaled result or an Unknown
        Outcome, never a second run. That holds for a failure that would settle it failed
        too: the step may have acted, so an operator decides.

        If storage refuses every write that would end the Attempt (each is tried twice), this
        returns None having written nothing: the cause is held for recovery, which ends the
        claim with it on its next sweep (see :meth:`Recovery.hold`).
        """
        try:
            return await self._ending(claim, exc)
        except StorageError as refused:
            cause = refused if isinstance(exc, ControlSignal) else exc
            self.recovery.hold(claim.submission.id, UnwrittenEnd(
                revision=claim.revision,
                error={**error_envelope(cause, attempt=claim.attempt),
                       "unrecorded": error_envelope(refused, attempt=claim.attempt)},
                final=final_failure(cause, claim.retried_unfixable),
                not_before=self.clock.now_ms() + backoff_ms(claim.charged - 1, self.config,
                                                            self.rng),
            ))
            return None

    async def _ending(self, claim: Claim, exc: BaseException) -> Settlement | None:
        """The writes of :meth:`_ended`; a storage refusal that outlives its retry raises."""
        aborted = transitions.accepted_abort(self.storage, claim.submission.id)
        if isinstance(exc, AbortObserved) or aborted is not None:
            return await self._settle(claim, Outcome.ABORTED,
                                      error=aborted or transitions.aborted_error(None))
        if self._park_if_in_flight(claim, exc):
            return None
        if final_failure(exc, claim.retried_unfixable):
            # A refused argument or value is refused again on every retry, and so is code
            # that cannot import or names nothing (unless its step says otherwise): fail.
            self.failures.failed(exc, claim.submission, attempt=claim.attempt, retry_at=None)
            return await self._settle(claim, Outcome.FAILED,
                                      error=error_envelope(exc, attempt=claim.attempt))
        if isinstance(exc, Suspend):
            signal = exc
            try:
                self._end(lambda: self._suspend(claim, signal),
                          lanes=(PUBLICATION,) if signal.kind is WaitKind.APPROVAL else ())
            except StorageError as refused:
                return await self._ended(claim, refusal_as_failure(refused))
            return None
        if isinstance(exc, YieldNow):
            self._end(lambda: self._release(claim, refund=True, not_before=None))
            return None
        return await self._failed(claim, exc)

    def _park_if_in_flight(self, claim: Claim, exc: BaseException) -> bool:
        """Make the submission an Unknown Outcome if an uncertain step is still in flight."""
        entry = journal.in_flight_uncertain(self.storage, claim.submission.id)
        if entry is None:
            return False
        error = None if isinstance(exc, ControlSignal) else error_envelope(
            exc, attempt=claim.attempt)

        def write() -> None:
            if not park_unknown(self.storage, self.ids.new_id("wait"), claim.submission.id,
                                thread_id=claim.submission.thread_id,
                                state=SubmissionState.RUNNING, revision=claim.revision,
                                step_key=entry.step_key, attempt=entry.attempt,
                                now=self.clock.now_ms(), error=error):
                raise LeaseLost(claim.submission.id)

        self._end(write)
        if error is not None:
            self.failures.failed(exc, claim.submission, attempt=claim.attempt, retry_at=None,
                                 unknown=True)
        return True

    async def _failed(self, claim: Claim, exc: BaseException) -> Settlement | None:
        """Retry after a backoff, or settle failed once the budget is spent. Only reached
        from :meth:`_ended`, after its in-flight check: no uncertain step is in flight."""
        error = error_envelope(exc, attempt=claim.attempt)
        if claim.charged >= self.config.max_attempts:
            self.failures.failed(exc, claim.submission, attempt=claim.attempt, retry_at=None)
            return await self._settle(claim, Outcome.FAILED, error=error)
        not_before = self.clock.now_ms() + backoff_ms(claim.charged - 1, self.config, self.rng)
        if isinstance(exc, RetryAfter):  # outside a step, or past its bounds: as it asked
            not_before = max(not_before, self.clock.now_ms() + exc.delay_ms)
        self.failures.failed(exc, claim.submission, attempt=claim.attempt, retry_at=not_before)
        self._end(lambda: self._release(claim, refund=False, not_before=not_before, error=error))
        return None

    def _end(self, fn: Callable[[], None], *, lanes: tuple[str, ...] = ()) -> None:
        """Commit the end of an Attempt that does not settle; a lost claim changes nothing."""

        def commit() -> None:
            if lanes:
                commit_fact(self.gate, fn, lanes)
            else:
                self.gate.mutate(fn, invalidates_recovery=False)

        try:
            commit_twice(commit)
        except LeaseLost:
            return

    def _release(
        self,
        claim: Claim,
        *,
        refund: bool,
        not_before: int | None,
        error: JsonValue = None,
    ) -> None:
        now = self.clock.now_ms()
        if not transitions.move(self.storage, claim.submission.id, state=SubmissionState.RUNNING,
                                revision=claim.revision, to=SubmissionState.READY, now=now,
                                not_before=not_before, refund_attempt=refund, error=error):
            raise LeaseLost(claim.submission.id)
        self.gate.schedule(NATIVE, now if not_before is None else not_before)

    def _suspend(self, claim: Claim, signal: Suspend) -> None:
        now = self.clock.now_ms()
        submission = claim.submission
        opened = waits.open_wait(self.storage, self.ids.new_id("wait"), submission.id,
                                 signal.kind, signal.wait_key, thread_id=submission.thread_id,
                                 now=now,
                                 payload_json=signal.payload_json, wake_at=signal.wake_at)
        # A wait is not a failure: refunding the attempt keeps an agent that waits many times
        # from spending the retry budget that ``max_attempts`` gives its failures.
        if not transitions.move(self.storage, submission.id, state=SubmissionState.RUNNING,
                                revision=claim.revision, to=SubmissionState.SUSPENDED, now=now,
                                refund_attempt=True):
            raise LeaseLost(submission.id)
        if signal.wake_at is not None:
            self.gate.schedule(NATIVE, signal.wake_at)
        if signal.kind is WaitKind.APPROVAL and opened:
            # Logged with the wait it announces: whoever reacts to it finds the wait open.
            # Only by the transaction that opened it, so the record is written once.
            body = {"submission_id": submission.id, "key": signal.wait_key,
                    "payload": decode_json(signal.payload_json)}
            # The payload was checked against the limits when the agent asked.
            history.append_history(
                self.storage, record_id=f"{submission.id}:approval:{signal.wait_key}",
                thread_id=submission.thread_id, submission_id=submission.id,
                kind=APPROVAL_REQUESTED, body_json=encode_json(body, max_depth=None), now=now)

    async def _settle(
        self,
        claim: Claim,
        outcome: Outcome,
        *,
        result_json: str | None = None,
        error: JsonValue = None,
    ) -> Settlement | None:
        await self.failpoints.reached(SETTLE_BEFORE)
        submission = claim.submission

        def write() -> Settlement:
            now = self.clock.now_ms()
            final, final_result, final_error = outcome, result_json, error
            # Settlement is a boundary too: an abort accepted while the agent ran wins. What
            # the Attempt last read of its intent answers while no abort was requested since.
            pending = outcome is Outcome.ABORTED or claim.abort is None or self.aborts.accepted(
                self.storage, submission.id, claim.abort)
            aborted = (None if outcome is Outcome.ABORTED or not pending
                       else transitions.accepted_abort(self.storage, submission.id))
            if aborted is not None:
                final, final_result, final_error = Outcome.ABORTED, None, aborted
            if not transitions.settle(self.storage, submission.id,
                                      thread_id=submission.thread_id,
                                      state=SubmissionState.RUNNING, revision=claim.revision,
                                      outcome=final, now=now, result_json=final_result,
                                      error=final_error, abort_pending=pending):
                raise LeaseLost(submission.id)
            return Settlement(submission.id, submission.thread_id, final,
                              decode_json(final_result), final_error)

        def commit() -> Settlement:
            # Settling frees the Thread's next input: native work, published with the record.
            return commit_fact(self.gate, write, (NATIVE, PUBLICATION))

        try:
            # Without a result only an error envelope is written, small and cut: a refusal of
            # it is transient if anything, so it is tried again.
            settlement = commit() if outcome is Outcome.COMPLETED else commit_twice(commit)
        except LeaseLost:
            return None
        except StorageError as refused:
            if outcome is not Outcome.COMPLETED:
                raise  # refused twice: the caller holds the cause for recovery
            # The result could not be stored: the Attempt fails now with that reason, rather
            # than leaving the claim to expire and be reported as lost.
            return await self._ended(claim, refusal_as_failure(refused))
        await self.failpoints.reached(SETTLE_AFTER)
        return settlement

    def _settle_open(
        self, item: WorkItem, outcome: Outcome, *, error: JsonValue
    ) -> Settlement | None:
        """Settle a submission no Attempt holds (a terminalizing head)."""

        def write() -> Settlement | None:
            if not transitions.settle(self.storage, item.submission_id, thread_id=item.thread_id,
                                      state=item.state, revision=item.revision, outcome=outcome,
                                      now=self.clock.now_ms(), error=error):
                return None
            return Settlement(item.submission_id, item.thread_id, outcome, None, error)

        return commit_fact(self.gate, write, (NATIVE, PUBLICATION))


def lease_owner_of(incarnation: str, lease_id: str) -> str:
    """The ``lease_owner`` stamp of a claim: the incarnation that made it, and the lease."""
    return f"{incarnation}/{lease_id}"


def _head_of(items: list[WorkItem]) -> WorkItem | None:
    for item in items:
        if item.state not in (SubmissionState.UNKNOWN, SubmissionState.JOINED):
            return item
    return None


__all__ = [
    "ATTEMPT_CLAIMED",
    "SETTLE_AFTER",
    "SETTLE_BEFORE",
    "UNFIXABLE",
    "ThreadRuntime",
    "lease_owner_of",
]
