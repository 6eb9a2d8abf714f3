"""The durable agent runtime: one Attempt at a Thread's head, settled exactly once.

``process_thread_head(thread)`` claims the Thread's head submission under a lease (its
deadline stands on the native lane, so a lost Attempt is found by the alarm), runs the agent
with a :class:`~threadline.threads.turn.Turn`, and ends the Attempt in exactly one of these
ways, each one compare-and-set on the claimed revision:

* the agent returned: settle ``completed`` (``aborted`` if an abort was accepted meanwhile);
* it waits (approval, timer): ``suspended``, its wait durable;
* it raised: ready again after a backoff, or ``failed`` once ``max_attempts`` is spent or the
  error is :class:`~threadline.errors.NonRetryable`;
* it observed an accepted abort, or one was accepted before it ended: settle ``aborted``;
* the pass's yield deadline passed at a step boundary: ready again, the attempt refunded.

If the object is lost mid-Attempt none of that happens; recovery decides later from the claim,
the journal and the abort intent (:mod:`threadline.threads.recovery`).

Each claim is stamped with this runtime's incarnation id (``<incarnation>/<lease id>`` in
``lease_owner``), and the runtime keeps the Threads whose Attempt it is running in memory. A
Durable Object runs one incarnation at a time, so recovery can tell a claim that is really in
flight (this incarnation, Thread active) from one that was lost (any other claim) without
waiting for its lease to expire.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Set

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import NonRetryable, ValidationFailed
from threadline.ids import IdSource
from threadline.scheduling import backoff_ms
from threadline.storage.port import Storage
from threadline.threads import outbox, transitions, waits
from threadline.threads.agents import AgentBinding, AgentRegistry, binding_registry_key
from threadline.threads.ledger import Ledger
from threadline.threads.model import (
    CLAIMABLE,
    JsonValue,
    Outcome,
    Settlement,
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
from threadline.threads.recovery import Recovery, RecoverySweepResult
from threadline.threads.signals import AbortObserved, LeaseLost, Suspend, YieldNow
from threadline.threads.turn import Claim, Turn

ATTEMPT_CLAIMED = "attempt:claimed"
SETTLE_BEFORE = "settle:before"
SETTLE_AFTER = "settle:after"

#: The kind of the outbox record published when an agent asks for an approval.
APPROVAL_REQUESTED_KIND = "approval.requested"

_ABORTED = {"type": "Aborted", "message": "aborted"}


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
        self.ledger = Ledger(storage, gate, clock=clock, ids=ids, config=config)
        self.recovery = Recovery(self.ledger, incarnation=self.incarnation, active=self._active)

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
            return self._settle_open(head, Outcome.ABORTED, error=_ABORTED)
        if head.state not in CLAIMABLE or (head.not_before or 0) > now:
            return None
        binding = self.registry.resolve(head.agent)
        claim = self._claim(head)
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
            if not transitions.claim(self.storage, head.submission_id, state=head.state,
                                     revision=head.revision, lease_owner=lease_owner,
                                     lease_expires_at=deadline, now=now):
                return None
            # The crash fallback: if this Attempt is lost, the alarm finds the expired lease.
            self.gate.schedule(NATIVE, deadline)
            return Claim(self.ledger.get(head.submission_id), lease_owner, head.revision + 1)

        return self.gate.mutate(write, invalidates_recovery=False)

    async def _attempt(
        self, claim: Claim, binding: AgentBinding, yield_after: int | None
    ) -> Settlement | None:
        turn = Turn(claim, storage=self.storage, gate=self.gate, clock=self.clock,
                    failpoints=self.failpoints, yield_after=yield_after)
        try:
            value = await binding.fn(turn)
        except LeaseLost:
            return None
        except (AbortObserved, Suspend, YieldNow, Exception) as exc:
            return await self._ended(claim, exc)
        try:
            result_json = encode_json(value, field="result")
        except ValidationFailed as exc:
            failure = NonRetryable(exc.message)
            return await self._settle(claim, Outcome.FAILED,
                                      error=error_envelope(failure, attempt=claim.attempt))
        return await self._settle(claim, Outcome.COMPLETED, result_json=result_json)

    async def _ended(self, claim: Claim, exc: BaseException) -> Settlement | None:
        """End an Attempt the agent left by raising ``exc``.

        Ending is a step boundary too: an abort accepted while the agent ran (after its last
        boundary, or while it unwound through ``finally`` blocks that await) settles the
        submission aborted, rather than parking it behind a wait or a retry. From the check to
        the commit nothing awaits, so no abort can slip in between.
        """
        if isinstance(exc, AbortObserved) or transitions.abort_accepted(
            self.storage, claim.submission.id
        ):
            return await self._settle(claim, Outcome.ABORTED, error=_ABORTED)
        if isinstance(exc, Suspend):
            signal = exc
            self._end(lambda: self._suspend(claim, signal),
                      lanes=(PUBLICATION,) if signal.kind is WaitKind.APPROVAL else ())
            return None
        if isinstance(exc, YieldNow):
            self._end(lambda: self._release(claim, refund=True, not_before=None))
            return None
        if isinstance(exc, NonRetryable):
            return await self._settle(claim, Outcome.FAILED,
                                      error=error_envelope(exc, attempt=claim.attempt))
        return await self._failed(claim, exc)

    async def _failed(self, claim: Claim, exc: BaseException) -> Settlement | None:
        error = error_envelope(exc, attempt=claim.attempt)
        if claim.attempt >= self.config.max_attempts:
            return await self._settle(claim, Outcome.FAILED, error=error)
        not_before = self.clock.now_ms() + backoff_ms(claim.attempt - 1, self.config, self.rng)
        self._end(lambda: self._release(claim, refund=False, not_before=not_before, error=error))
        return None

    def _end(self, fn: Callable[[], None], *, lanes: tuple[str, ...] = ()) -> None:
        """Commit the end of an Attempt that does not settle; a lost claim changes nothing."""
        try:
            if lanes:
                commit_fact(self.gate, fn, lanes)
            else:
                self.gate.mutate(fn, invalidates_recovery=False)
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
        waits.open_wait(self.storage, self.ids.new_id("wait"), submission.id, signal.kind,
                        signal.wait_key, now=now, payload_json=signal.payload_json,
                        wake_at=signal.wake_at)
        # A wait is not a failure: refunding the attempt keeps an agent that waits many times
        # from spending the retry budget that ``max_attempts`` gives its failures.
        if not transitions.move(self.storage, submission.id, state=SubmissionState.RUNNING,
                                revision=claim.revision, to=SubmissionState.SUSPENDED, now=now,
                                refund_attempt=True):
            raise LeaseLost(submission.id)
        if signal.wake_at is not None:
            self.gate.schedule(NATIVE, signal.wake_at)
        if signal.kind is WaitKind.APPROVAL:
            # Published with the wait it announces: whoever reacts to it finds the wait open.
            body = {"submission_id": submission.id, "key": signal.wait_key,
                    "payload": decode_json(signal.payload_json)}
            outbox.publish(self.storage, record_id=f"{submission.id}:approval:{signal.wait_key}",
                           thread_id=submission.thread_id, kind=APPROVAL_REQUESTED_KIND,
                           body_json=encode_json(body), now=now)

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
            # Settlement is a boundary too: an abort accepted while the agent ran wins.
            if outcome is not Outcome.ABORTED and transitions.abort_accepted(
                self.storage, submission.id
            ):
                final, final_result, final_error = Outcome.ABORTED, None, _ABORTED
            if not transitions.settle(self.storage, submission.id,
                                      thread_id=submission.thread_id,
                                      state=SubmissionState.RUNNING, revision=claim.revision,
                                      outcome=final, now=now, result_json=final_result,
                                      error=final_error):
                raise LeaseLost(submission.id)
            return Settlement(submission.id, submission.thread_id, final,
                              decode_json(final_result), final_error)

        try:
            # Settling frees the Thread's next input: native work, published with the record.
            settlement = commit_fact(self.gate, write, (NATIVE, PUBLICATION))
        except LeaseLost:
            return None
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
    "APPROVAL_REQUESTED_KIND",
    "ATTEMPT_CLAIMED",
    "SETTLE_AFTER",
    "SETTLE_BEFORE",
    "ThreadRuntime",
    "lease_owner_of",
]
