"""The ``threadline:messages`` lane: messages sent with ``turn.send`` reach their Threads.

``turn.send`` writes a pending row in ``tl_messages`` at the end of its target space's queue
and makes this lane due. Each space messages are pending to has one target row
(``tl_message_targets``), due when its oldest pending message goes next. A wave serves every
target due, side by side, each its messages oldest first, and returns when the next target is
due (None when nothing is pending, so the lane goes idle and arms no alarm).

* **Into the sender's own space** a message is admitted in one transaction with its marking
  as delivered (and the wave's progress): it is admitted exactly once, and a loss of the
  object before that commit leaves it pending, admitted nowhere.
* **Into another space** it goes through the :class:`~threadline.threads.routing.MessageRouter`.
  One delivery attempt is charged first, durably (should the call hang or the object be
  lost, the message and its target are due again once the call's bound and a backoff have
  passed), then the router is called, bounded by ``call_timeout_ms``. The target admits it
  idempotently by message id, so a delivery repeated after a loss between its answer and the
  recording of that answer finds the submission the first one made.
* **A target that does not answer** (the call raises or times out) backs off on its own row:
  its oldest message waits out ``alarm_backoff_base_ms * 2**failures`` (``failures``: calls
  in a row that did not reach it; jittered over its upper half, capped at
  ``alarm_backoff_cap_ms``) and goes again, and the messages behind it wait for it, so a
  target that answers again gets its messages in the order they were sent. The other targets
  keep their own times: one hung space holds only the messages sent to it. Recording that
  backoff is the wave's progress, so the lane never parks over a target it is backing off.
* **Refused for good** (an agent the target does not register, input it refuses, a message
  past ``max_message_hops``), a message is marked ``failed`` with the reason, and a
  ``message.failed`` record is appended to the sender's Thread log in the same transaction;
  the target's next message goes at once.
* **A chain ends.** Each message carries its hop count (``turn.send`` from a submission that
  came from a message of ``h`` hops sends one of ``h + 1``; the count travels in the envelope
  and is stored with the message and the submission it becomes). One past
  ``RuntimeConfig.max_message_hops`` fails here (``MessageLoop``, naming the count and the
  bound) before it is delivered, and a target refuses one past its own bound the same way.

A remote call starts only while its whole timeout fits before the wave's deadline, which fits
the event's (the lane runner's rule for waves): otherwise that target's turn ends there and
the lane is due again at once, for the next event. Targets are served concurrently, so a call
that hangs to its bound costs the other targets nothing, and while one is served the wave looks
for targets fallen due every ``POLL_MS`` (a message sent meanwhile does not wait for that
call); each target is served once per wave, so one whose backoff is shorter than a call cannot
spin a wave.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from threadline.clock import Clock, timer
from threadline.config import RuntimeConfig
from threadline.maintenance.lane_wave import current_wave
from threadline.scheduling import backoff_ms
from threadline.storage.port import Storage
from threadline.threads import history
from threadline.threads import message_rows as rows
from threadline.threads.agents import AgentRegistry
from threadline.threads.message_rows import Message, Target
from threadline.threads.model import encode_json
from threadline.threads.ports import PUBLICATION, Failpoints, MutationGate
from threadline.threads.records import MESSAGE_FAILED
from threadline.threads.routing import Accepted, MessageEnvelope, MessageRouter, Refused, Verdict

_logger = logging.getLogger("threadline.maintenance")

#: Messages read per batch of a wave.
DELIVERY_BATCH = 50
#: Bound of one wave of the messages lane.
MESSAGES_DISPATCH_TIMEOUT_MS = 30_000
#: Bound of one call to another space's object.
MESSAGE_CALL_TIMEOUT_MS = 10_000
#: While a target is being served, how often a wave looks for other targets fallen due.
POLL_MS = 500
#: Inside the transaction admitting a message into its own space, before it is marked.
ADMITTING = "maintenance:messages:admitting"
#: After another space's object answered, before the answer is recorded.
ANSWERED = "maintenance:messages:answered"
#: Why a message to another space fails where nothing routes it.
NO_ROUTE = "NoRoute: this object has no route to other spaces"


class _CallTimedOut(Exception):
    """The router did not answer within the call's bound."""


class MessageDelivery:
    """The handler of the ``threadline:messages`` lane, over one incarnation's storage.

    ``space`` is the name of the space this object serves (None when it does not know it:
    every message then goes through ``router``); the :class:`~threadline.space.Space` sets
    it once it learns the name. ``router`` reaches other spaces (None: a message to another
    space fails with ``NoRoute``).
    """

    def __init__(
        self,
        storage: Storage,
        gate: MutationGate,
        agents: AgentRegistry,
        config: RuntimeConfig,
        clock: Clock,
        rng: random.Random,
        failpoints: Failpoints,
        *,
        space: str | None,
        router: MessageRouter | None,
        batch: int = DELIVERY_BATCH,
        call_timeout_ms: int = MESSAGE_CALL_TIMEOUT_MS,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if batch < 1:
            raise ValueError("a batch delivers at least one message")
        self._storage = storage
        self._gate = gate
        self._agents = agents
        self._config = config
        self._clock = clock
        self._rng = rng
        self._failpoints = failpoints
        self.space = space
        self._router = router
        self._batch = batch
        self._call_timeout_ms = call_timeout_ms
        self._log = log if log is not None else _logger.warning

    async def run_lane(self, now: int, deadline: int) -> int | None:
        """Serve every target due; return when the next one is due (None: nothing is
        pending), or now when the deadline came first with some still due."""
        del now  # each look serves what is due when it is taken
        served: set[str] = set()
        serving: set[asyncio.Task[None]] = set()
        due: list[Target] = []
        next_due: int | None = None
        try:
            while True:
                at = self._clock.now_ms()
                if at < deadline:
                    due, next_due = rows.due_targets(self._storage, at, self._batch)
                    for target in due:
                        if target.space not in served:
                            served.add(target.space)
                            serving.add(asyncio.ensure_future(self._serve(target, deadline)))
                if not serving:
                    # Nothing due, or only targets this wave served already (one whose call did
                    # not fit, or whose backoff is shorter than a call): theirs is a later wave.
                    return at if at >= deadline or due else next_due
                # Targets run side by side, and one that falls due meanwhile (a message sent
                # while another space's call hangs) starts within a poll, not after that call.
                poll = timer(self._clock, self._clock.now_ms() + POLL_MS)
                try:
                    done, _ = await asyncio.wait({*serving, poll},
                                                 return_when=asyncio.FIRST_COMPLETED)
                finally:
                    poll.cancel()
                for task in done - {poll}:
                    serving.discard(task)
                    task.result()  # a target's storage failure, or the loss, is the wave's
        finally:
            # Cancelled from outside (the wave's bound), or one target failed: the others stop.
            for task in serving:
                task.cancel()
            if serving:
                await asyncio.wait(serving)

    async def _serve(self, target: Target, deadline: int) -> None:
        """Deliver ``target``'s messages oldest first until none is left, one is not answered
        (the target backs off), or the deadline comes."""
        failures = target.failures
        while True:
            message = rows.head(self._storage, target.space)
            if message is None:
                self._storage.transaction(lambda: rows.forget_target(self._storage, target.space))
                return
            at = self._clock.now_ms()
            remote = not self._local(message) and self._router is not None
            if at >= deadline or (remote and at + self._call_timeout_ms > deadline):
                return
            if message.hops > self._config.max_message_hops:
                self._fail(message, rows.loop_reason(message.hops, self._config.max_message_hops))
            elif self._local(message):
                self._admit_locally(message)
            elif not remote:
                self._fail(message, NO_ROUTE)
            elif not await self._call(message, at, failures):
                return
            failures = 0
            # Other targets, native work and the other waves get a turn between messages.
            await self._clock.sleep_until(self._clock.now_ms())

    def _local(self, message: Message) -> bool:
        return self.space is not None and message.to_space == self.space

    def _admit_locally(self, message: Message) -> None:
        progress = _progress()

        def mark(submission_id: str) -> None:
            self._failpoints.hit(ADMITTING)
            if not rows.mark_delivered(self._storage, message.id, submission_id,
                                       self._clock.now_ms()):
                raise RuntimeError(f"message {message.id!r} changed while it was admitted")
            progress()

        verdict = rows.admit_inbound(
            self._storage, self._gate, self._agents, self._config, self._clock.now_ms,
            message_id=message.id, to_thread=message.to_thread, agent=message.agent,
            input_json=message.input_json, hops=message.hops, from_space=self.space,
            from_thread=message.from_thread, local=True, also=mark,
        )
        if isinstance(verdict, Refused):
            self._fail(message, verdict.reason)

    async def _call(self, message: Message, at: int, failures: int) -> bool:
        """One delivery through the router; False when it did not reach the target, which
        then backs off (``failures`` calls in a row failed before this one)."""
        assert self._router is not None
        backoff = backoff_ms(failures, self._config, self._rng)
        # Should the call outlive its bound or the object be lost during it, the message is
        # due again once the call would have ended and the backoff has passed.
        fallback = at + self._call_timeout_ms + backoff
        if not self._storage.transaction(lambda: rows.claim(self._storage, message, fallback)):
            return False  # changed since it was read: a later wave reads it again
        envelope = MessageEnvelope(
            message_id=message.id, from_space=self.space, from_thread=message.from_thread,
            from_submission=message.from_submission, to_space=message.to_space,
            to_thread=message.to_thread, agent=message.agent, input_json=message.input_json,
            hops=message.hops,
        )
        try:
            verdict = await self._bounded(self._router.deliver(envelope),
                                          at + self._call_timeout_ms)
        except Exception as exc:  # transient: retried after the backoff
            cause = "TimedOut" if isinstance(exc, _CallTimedOut) else type(exc).__name__
            retry_at = self._clock.now_ms() + backoff
            self._log(
                f"threadline: message {message.id!r} to space {message.to_space!r} not "
                f"delivered ({cause}); the space is retried at {retry_at} (attempt "
                f"{message.attempts + 1}, {failures + 1} in a row to it)"
            )
            progress = _progress()

            def back_off() -> None:
                rows.note_failure(self._storage, message, cause, retry_at)
                # The target's backoff is this failure handled: the lane itself is not
                # stalling, and its other targets keep going.
                progress()

            self._storage.transaction(back_off)
            return False
        await self._failpoints.reached(ANSWERED)
        if isinstance(verdict, Accepted):
            self._record_delivered(message, verdict.submission_id)
        else:
            self._fail(message, verdict.reason)
        return True

    def _record_delivered(self, message: Message, submission_id: str) -> None:
        progress = _progress()

        def write() -> None:
            if rows.mark_delivered(self._storage, message.id, submission_id,
                                   self._clock.now_ms()):
                progress()

        self._gate.mutate(write, invalidates_recovery=False, threads=())

    def _fail(self, message: Message, reason: str) -> None:
        """``pending -> failed`` and the sender's ``message.failed`` record, together."""
        progress = _progress()
        body = encode_json({"message_id": message.id, "to_space": message.to_space,
                            "to_thread": message.to_thread, "hops": message.hops,
                            "reason": reason}, max_depth=None)

        def write() -> bool:
            now = self._clock.now_ms()
            if not rows.mark_failed(self._storage, message.id, reason, now):
                return False
            history.append_history(
                self._storage, record_id=f"{message.id}:failed", thread_id=message.from_thread,
                submission_id=message.from_submission, kind=MESSAGE_FAILED, body_json=body,
                now=now,
            )
            self._gate.record_progress((PUBLICATION,))
            progress()
            return True

        if self._gate.mutate(write, invalidates_recovery=False, threads=()):
            self._log(
                f"threadline: message {message.id!r} to space {message.to_space!r}, thread "
                f"{message.to_thread!r} failed for good: {reason.split(':', 1)[0]}"
            )

    async def _bounded(self, call: Awaitable[Verdict], until: int) -> Verdict:
        task = asyncio.ensure_future(call)
        timer = asyncio.ensure_future(self._clock.sleep_until(until))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not task.done():
                # Nobody waits for its answer any more; the claim's retry stands.
                task.cancel()
        if not task.done() or task.cancelled():
            raise _CallTimedOut
        return task.result()


def _progress() -> Callable[[], None]:
    """The current wave's progress report (a no-op outside a wave)."""
    wave = current_wave()
    return (lambda: None) if wave is None else wave.progress


__all__ = [
    "ADMITTING",
    "ANSWERED",
    "DELIVERY_BATCH",
    "MESSAGES_DISPATCH_TIMEOUT_MS",
    "MESSAGE_CALL_TIMEOUT_MS",
    "NO_ROUTE",
    "POLL_MS",
    "MessageDelivery",
]
