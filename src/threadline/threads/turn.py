"""``Turn``: what an agent sees of its submission during one Attempt.

Everything an agent does through a Turn is durable and replayable. Each call gets a key from its
kind, name and occurrence (``step:plan``, ``step:plan#2``, ``emit#1``...), so an Attempt that
runs the agent again from the top, after a crash, a retry or a wait, meets its earlier work in
the same order and gets the recorded answers back instead of repeating it. Agents must therefore
be deterministic apart from what they do inside steps.

Every boundary (a step, emit, send, approval, sleep or followups call that has not happened
yet) first checks the submission's abort intent and the pass's yield deadline, and every write
is fenced by the Attempt's claim: an Attempt that lost its lease cannot write anything more.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from collections.abc import Callable, Container, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from threadline.clock import Clock, to_epoch_ms
from threadline.config import RuntimeConfig
from threadline.errors import (
    Conflict,
    Evicted,
    NonRetryable,
    StorageValueTooLarge,
    ValidationFailed,
)
from threadline.storage.port import Storage
from threadline.threads import (
    delayed,
    followups,
    history,
    journal,
    ledger,
    message_rows,
    views,
    waits,
)
from threadline.threads.abort_watch import AbortRead, AbortWatch
from threadline.threads.followups import MAX_FOLLOWUPS, Followup
from threadline.threads.model import (
    MAX_SLEEP_SECONDS,
    ApprovalDecision,
    JsonValue,
    StepEffect,
    StepState,
    Submission,
    SubmissionState,
    WaitKind,
    WaitState,
    check_id,
    decode_json,
    digest,
    encode_json,
    error_envelope,
)
from threadline.threads.ports import (
    DELAYED,
    MESSAGES,
    PUBLICATION,
    Failpoints,
    MutationGate,
    commit_fact,
)
from threadline.threads.signals import (
    AbortObserved,
    ControlSignal,
    LeaseLost,
    StepInFlight,
    Suspend,
    YieldNow,
)

T = TypeVar("T")

_FENCE = "SELECT state, revision, lease_owner FROM tl_submissions WHERE id = ?"

STEP_STARTED = "step:started"
STEP_FINISHED = "step:finished"
EMIT_COMMITTED = "emit:committed"
FOLLOWUPS_JOINED = "followups:joined"

#: What ``emit(kind=...)`` accepts: a letter, then up to 63 of ``[A-Za-z0-9_.:-]``.
KIND_PATTERN = r"[A-Za-z][A-Za-z0-9_.:-]{0,63}"
#: Record kinds the runtime publishes itself (``submission.settled``, ``approval.requested``,
#: ``approval.decided``) and may add to; an agent's record may not pass for one of them.
RESERVED_KIND_PREFIXES = ("submission.", "approval.", "threadline.")
#: Bounds a RetryPolicy is checked against when it is built.
MAX_STEP_TRIES = 100
MAX_STEP_DELAY_MS = 3_600_000
MAX_BACKOFF = 1_000.0

_KIND = re.compile(KIND_PATTERN)
#: What may leave an Attempt as it is: the runtime's signals, a (simulated) eviction, and the
#: host cancelling or stopping the code. Anything else an agent raises fails the Attempt.
PROPAGATES = (ControlSignal, Evicted, asyncio.CancelledError, KeyboardInterrupt, SystemExit)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a step's function is tried within one Attempt before the Attempt fails.

    The default tries once: a failing step fails the Attempt, and the submission's own retry
    policy (``RuntimeConfig.max_attempts`` with backoff) takes over. Exceptions of a type in
    ``non_retryable`` (and :class:`~threadline.NonRetryable`) are never retried here.
    """

    max_attempts: int = 1
    initial_delay_ms: int = 0
    backoff: float = 2.0
    max_delay_ms: int = 60_000
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if not _is_int(self.max_attempts) or not 1 <= self.max_attempts <= MAX_STEP_TRIES:
            raise ValueError(f"max_attempts must be an int from 1 to {MAX_STEP_TRIES}")
        for name in ("initial_delay_ms", "max_delay_ms"):
            delay = getattr(self, name)
            if not _is_int(delay) or not 0 <= delay <= MAX_STEP_DELAY_MS:
                raise ValueError(f"{name} must be an int from 0 to {MAX_STEP_DELAY_MS}")
        if (
            isinstance(self.backoff, bool)
            or not isinstance(self.backoff, (int, float))
            or not 1 <= self.backoff <= MAX_BACKOFF
        ):
            raise ValueError(f"backoff must be a number from 1 to {MAX_BACKOFF:g}")
        if not isinstance(self.non_retryable, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException)
            for kind in self.non_retryable
        ):
            raise ValueError("non_retryable must be a tuple of exception types")

    def retries(self, exc: Exception, tried: int) -> bool:
        """Whether a step that raised ``exc`` on try number ``tried`` is tried again."""
        if tried >= self.max_attempts or isinstance(exc, NonRetryable):
            return False
        return not isinstance(exc, self.non_retryable)

    def delay_ms(self, tried: int) -> int:
        """The pause before try number ``tried + 1``: exponential, never above ``max_delay_ms``.

        The growth is clamped as it is computed, so a large ``backoff`` cannot overflow.
        """
        delay = float(self.initial_delay_ms)
        for _ in range(max(0, tried - 1)):
            if delay >= self.max_delay_ms:
                break
            delay *= self.backoff
        return int(min(delay, self.max_delay_ms))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Claim:
    """The claim an Attempt holds: the submission as claimed and the lease that fences it."""

    submission: Submission
    lease_owner: str
    revision: int
    #: What the Attempt last read of its abort intent (first: the claim's own UPDATE). None:
    #: unknown, read at the first check.
    abort: AbortRead | None = None

    @property
    def attempt(self) -> int:
        """The Attempt's number, from 1: the submission's ``attempts`` once claimed (see
        :attr:`Turn.attempt`)."""
        return self.submission.attempts

    @property
    def charged(self) -> int:
        """Attempts charged against ``max_attempts``, this one included: its number less the
        Attempts before it lost without failing (:mod:`threadline.threads.losses`)."""
        return self.submission.attempts - self.submission.losses


class Turn:
    """One Attempt's view of its submission. Agents receive it as their only argument."""

    def __init__(
        self,
        claim: Claim,
        *,
        storage: Storage,
        gate: MutationGate,
        clock: Clock,
        failpoints: Failpoints,
        yield_after: int | None = None,
        config: RuntimeConfig | None = None,
        deadline: int | None = None,
        host_lanes: Set[str] = frozenset(),
        agents: Container[str] = frozenset(),
        join_followups: bool = False,
        aborts: AbortWatch | None = None,
    ) -> None:
        self._claim = claim
        # Aborts this incarnation requested: a check reads the intent only when one was.
        self._aborts = aborts if aborts is not None else AbortWatch()
        self._abort = claim.abort if claim.abort is not None else AbortRead(-1, False)
        self._storage = storage
        self._gate = gate
        self._clock = clock
        self._failpoints = failpoints
        self._yield_after = yield_after
        self._config = config if config is not None else RuntimeConfig()
        # The Attempt's wall bound (epoch ms): in-step retries never plan to sleep past it.
        self._deadline = deadline
        self._host_lanes = host_lanes
        # The agents this deployment registers: what ``submit`` may name.
        self._agents = agents
        # The agent was registered with ``join_followups=True``: it may call followups().
        self._join_followups = join_followups
        self._seen: dict[str, int] = {}
        self._position = 0
        # Uncertain steps this Attempt journaled as started and not yet as finished or failed.
        self._unsettled: set[str] = set()
        self._revoked = False
        # The ids of the submission's records in the log (see _logged), read at the first emit.
        self._records: set[str] | None = None

    @property
    def input(self) -> JsonValue:
        """The submission's input, as admitted."""
        return self._claim.submission.input

    @property
    def submission_id(self) -> str:
        """The submission this Attempt runs."""
        return self._claim.submission.id

    @property
    def thread_id(self) -> str:
        """The Thread the submission belongs to."""
        return self._claim.submission.thread_id

    @property
    def attempt(self) -> int:
        """This Attempt's number, from 1: one more than the Attempts of the submission before
        it that failed, were lost or left an Unknown Outcome.

        An Attempt that suspends (an approval, a timer) or yields gives its number back: the
        Attempt that resumes after it has the same number. So this counts tries of the work,
        not runs of the agent: an agent that waits three times and never fails runs four
        times, each with ``attempt == 1``.
        """
        return self._claim.attempt

    @property
    def aborted(self) -> bool:
        """True once an abort of this submission was accepted.

        Read from storage, unless no abort at all was requested in this object since the last
        read (:mod:`threadline.threads.abort_watch`).
        """
        return self._aborts.accepted(self._storage, self.submission_id, self._abort)

    @property
    def has_step_in_flight(self) -> bool:
        """True while an uncertain step this Attempt started has no journaled end.

        Kept in memory: a claimed submission never starts with such a step (every end of an
        Attempt and every recovery resolves it first), so only this Attempt can have one.
        """
        return bool(self._unsettled)

    def revoke(self) -> None:
        """End this Turn: every later boundary and write raises ``LeaseLost``.

        The runtime revokes a Turn when its Attempt ends, so code of the agent that outlives
        the Attempt (a task that ignored a cancellation, one it spawned) starts no step and
        commits nothing, even while the claim it held is still running for recovery to find.
        """
        self._revoked = True

    # -- durable operations ------------------------------------------------------------------

    async def step(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        effect: StepEffect | str = StepEffect.IDEMPOTENT,
        retry: RetryPolicy | None = None,
    ) -> JsonValue:
        """Run ``fn`` (sync or async) once, journal its JSON result, and return it.

        On replay a finished step returns its journaled value without calling ``fn``. The value
        is returned as decoded from its JSON, on the first run too, so both runs see the same
        thing. With ``effect="uncertain"`` a crash while ``fn`` runs makes the submission an
        Unknown Outcome for an operator to resolve, instead of calling ``fn`` again; so does
        any other end of the Attempt while it is in flight (its result failed to be journaled,
        the Attempt timed out). ``name`` is an identifier (``[A-Za-z0-9._:-]{1,128}``, not
        ``.`` or ``..``); calling a name again within one Attempt journals a further
        occurrence of it. A bad name, effect or policy raises ``ValidationFailed``, and a value
        over ``max_value_bytes`` or nested deeper than ``max_json_depth`` raises
        ``NonRetryable``: either fails the Attempt for good.
        """
        # A bad name, effect or policy is a programming error: retrying cannot fix it.
        effect = _checked(lambda: StepEffect(effect), "effect must be idempotent or uncertain")
        # The occurrence suffix ("#2") cannot appear in a name, so no name aliases another
        # step's later occurrence and reads its journal entry.
        _checked(lambda: check_id(name, field="step"))
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ValidationFailed("retry must be a RetryPolicy", field="retry")
        key = self._key(f"step:{name}")
        position = self._next_position()
        entry = journal.read_entry(self._storage, self.submission_id, key)
        if entry is not None and entry.state is StepState.FINISHED:
            return entry.value
        if (entry is not None and entry.state is StepState.STARTED
                and entry.effect is StepEffect.UNCERTAIN):
            # Every end of an Attempt resolves such an entry, so only a row written before
            # that rule (or by hand) gets here: never run it a second time.
            raise StepInFlight(self.submission_id)
        await self._boundary()
        if effect is StepEffect.UNCERTAIN:
            self._write(lambda: self._journal(key, position, effect, StepState.STARTED))
            self._unsettled.add(key)
        await self._failpoints.reached(STEP_STARTED)
        value = await self._run(fn, key, position, effect, retry or RetryPolicy())
        try:
            value_json = self._encode(value, field=f"step {name!r} value")
        except ValidationFailed as exc:
            failure = NonRetryable(exc.message)
            if effect is StepEffect.UNCERTAIN:
                # It returned, so it is no longer in flight, even though its value is lost.
                self._record_failure(key, position, effect, failure)
            raise failure from exc
        # If this write fails the step stays in flight: an uncertain one then becomes an
        # Unknown Outcome (the runtime sees its `started` entry), never a second run. Only
        # storage refusing the value as too large is final, like the configured limit above.
        try:
            self._write(lambda: self._journal(
                key, position, effect, StepState.FINISHED, value_json=value_json))
            self._unsettled.discard(key)
        except NonRetryable as refused:
            if effect is StepEffect.UNCERTAIN:
                self._record_failure(key, position, effect, refused)
            raise
        await self._failpoints.reached(STEP_FINISHED)
        return decode_json(value_json)

    async def _run(
        self,
        fn: Callable[[], Any],
        key: str,
        position: int,
        effect: StepEffect,
        policy: RetryPolicy,
    ) -> Any:
        """Call ``fn`` until it returns or ``policy`` stops retrying it.

        Before each retry the abort intent is read again, and a pause that would end past the
        Attempt's wall bound is not started: the step fails with its last error instead.
        """
        tried = 0
        while True:
            tried += 1
            try:
                value = fn()
                if inspect.isawaitable(value):
                    value = await value
                return value
            except Exception as exc:
                retrying = policy.retries(exc, tried)
                if retrying:
                    wake = self._clock.now_ms() + policy.delay_ms(tried)
                    in_time = self._deadline is None or wake < self._deadline
                    retrying = in_time and not self.aborted
                    if retrying:
                        await self._clock.sleep_until(wake)
                        retrying = not self.aborted
                if retrying:
                    continue
                if effect is StepEffect.UNCERTAIN:
                    # It returned control, so it is no longer in flight: not Unknown.
                    self._record_failure(key, position, effect, exc)
                if self.aborted:
                    raise AbortObserved(self.submission_id) from exc
                raise
            except BaseException as exc:
                # A foreign BaseException also means the function returned control; a signal,
                # an eviction or a cancellation leaves it in flight.
                if effect is StepEffect.UNCERTAIN and not isinstance(exc, PROPAGATES):
                    self._record_failure(key, position, effect, exc)
                raise

    async def emit(self, record: JsonValue, *, kind: str = "record") -> str:
        """Append ``record`` to the Thread's log; returns its id.

        The record and the publication-lane enrollment commit in one transaction. On
        replay the record is found by its id and not appended again. ``kind`` matches
        ``KIND_PATTERN`` and does not start with a reserved prefix (``submission.``,
        ``approval.``, ``threadline.``: the runtime's own records); ``record`` fits
        ``max_value_bytes`` and ``max_json_depth``. Otherwise ``ValidationFailed`` fails the
        Attempt for good.
        """
        _checked(lambda: check_kind(kind))
        record_id = f"{self.submission_id}:{self._key('emit')}"
        self._next_position()
        if record_id in self._logged():
            return record_id
        body_json = self._encode_or_fail(record, field="record")
        await self._boundary()

        def write() -> None:
            history.append_history(
                self._storage, record_id=record_id, thread_id=self.thread_id,
                submission_id=self.submission_id, kind=kind, body_json=body_json,
                now=self._clock.now_ms(),
            )

        self._write(write, lanes=(PUBLICATION,))
        self._logged().add(record_id)
        await self._failpoints.reached(EMIT_COMMITTED)
        return record_id

    def _logged(self) -> set[str]:
        """The ids of the submission's records in the log: read once per Attempt (the log
        keeps no index of ids), then kept up to date by this Attempt's own appends; no other
        Attempt of the submission writes while this one holds the claim."""
        if self._records is None:
            self._records = history.submission_records(self._storage, self.submission_id)
        return self._records

    async def send(
        self, space: str, thread: str, input: JsonValue, agent: str | None = None
    ) -> str:
        """Send ``input`` to the Thread ``thread`` of ``space``; returns the message id.

        Only the message is written here, once even across replays (its id is this
        submission's id and the call's place in it: ``<submission id>:send``,
        ``...:send#2``). The ``threadline:messages`` lane delivers it: into this space in one
        transaction, into another through the Worker's ``THREADS`` binding. It becomes a
        submission of ``thread`` for ``agent`` (None: the Thread's latest agent there, else
        its only one), admitted once by message id however often it is delivered. A message
        refused there for good (an unknown agent, invalid input) is marked failed and a
        ``message.failed`` record lands in this Thread's log. This submission's detail lists
        its messages and their states.
        """
        _checked(lambda: check_id(space, field="space"))
        _checked(lambda: check_id(thread, field="thread"))
        if agent is not None:
            _checked(lambda: check_id(agent, field="agent"))
        message_id = f"{self.submission_id}:{self._key('send')}"
        self._next_position()
        if message_rows.message_exists(self._storage, message_id):
            return message_id
        input_json = self._encode_or_fail(input, field="message input")
        await self._boundary()

        def write() -> None:
            message_rows.enqueue_message(
                self._storage, message_id=message_id, from_thread=self.thread_id,
                from_submission=self.submission_id, to_space=space, to_thread=thread,
                input_json=input_json, now=self._clock.now_ms(), agent=agent,
            )

        self._write(write, lanes=(MESSAGES,))
        return message_id

    async def wake_lane(self, lane: str, at: datetime | None = None) -> None:
        """Make the host lane ``lane`` due at ``at`` (an aware ``datetime``; now when None).

        Committed with this Attempt's facts: the enrollment, its alarm and a journal entry
        (``wake_lane``, ``wake_lane#2``...) commit in one transaction fenced by the Attempt's
        claim, so an Attempt that lost its claim enrolls nothing, and a replay that meets the
        entry enrolls nothing again: each call wakes the lane once across replays. It never
        moves the lane earlier than its retry floor (a lane backing off after failed waves
        keeps its backoff). A lane this deployment does not declare, or a naive datetime,
        raises ``ValidationFailed``, which fails the Attempt for good.
        """
        key = self._key("wake_lane")
        position = self._next_position()
        entry = journal.read_entry(self._storage, self.submission_id, key)
        if entry is not None and entry.state is StepState.FINISHED:
            return
        if not isinstance(lane, str) or lane not in self._host_lanes:
            raise ValidationFailed(f"no host lane {lane!r} is declared in this deployment",
                                   field="lane")
        try:
            due = None if at is None else to_epoch_ms(at)
        except (TypeError, ValueError) as exc:
            raise ValidationFailed(f"wake_lane at: {exc}", field="at") from None
        await self._boundary()
        due_at = self._clock.now_ms() if due is None else due
        value_json = encode_json({"lane": lane, "at": due_at})

        def write() -> None:
            self._journal(key, position, StepEffect.IDEMPOTENT, StepState.FINISHED,
                          value_json=value_json)
            self._gate.schedule(lane, due_at)

        self._write(write)

    async def submit(
        self,
        thread: str,
        input: JsonValue,
        agent: str | None = None,
        not_before: datetime | timedelta | None = None,
        key: str | None = None,
    ) -> str:
        """Submit ``input`` to the Thread ``thread`` of this space; return the submission's id.

        Committed with this Attempt's facts: the submission (with a ``not_before`` ahead, the
        delayed submission and its due time), its alarm and a journal entry (``submit``,
        ``submit#2``...) commit in one transaction fenced by the Attempt's claim. An Attempt
        that lost its claim submits nothing, and a replay that meets the entry returns the
        same id without submitting again: each call submits once across replays. The target
        may be this submission's own Thread, where the new input queues behind it.

        ``agent`` defaults to the target Thread's latest agent, else this submission's own;
        it must be registered in this deployment. ``not_before`` is an aware ``datetime``, or
        a ``timedelta`` from now (0 to 366 days): until then the submission is scheduled,
        holding no place in its Thread's FIFO; a time at or before now (before 1970
        included) admits at once, one more than 366 days ahead is refused. ``key`` is its
        idempotency key in the target Thread (default: derived from this submission's id and
        the call's position, ``<submission id>:submit``, ``<submission id>:submit.2``...): a
        key the Thread already holds with the same agent and input answers with that
        submission's id, one held with other input is refused. A refusal raises
        ``ValidationFailed``, which fails the Attempt for good.
        """
        name = self._key("submit")
        position = self._next_position()
        entry = journal.read_entry(self._storage, self.submission_id, name)
        if entry is not None and entry.state is StepState.FINISHED:
            return str(entry.value["id"])
        _checked(lambda: check_id(thread, field="thread"))
        if key is None:
            key = f"{self.submission_id}:{name.replace('#', '.')}"
        _checked(lambda: check_id(key, field="key"))
        if agent is not None:
            _checked(lambda: check_id(agent, field="agent"))
        if not_before is not None and not isinstance(not_before, datetime | timedelta):
            raise ValidationFailed("not_before is an aware datetime or a timedelta",
                                   field="not_before")
        input_json = self._encode_or_fail(input, field="submission input")
        await self._boundary()
        now = self._clock.now_ms()
        due_at = delayed.check_due(_due_ms(not_before, now), now)
        chosen = (agent or views.latest_agent(self._storage, thread)
                  or self._claim.submission.agent)
        if chosen not in self._agents:
            raise ValidationFailed(f"agent {chosen!r} is not registered in this deployment",
                                   field="agent")
        input_digest = digest(chosen, input_json)
        # Deterministic: this submission's call at this position, so its id is its own.
        made = "sub_" + digest(self.submission_id, name)[:32]
        later = due_at is not None and due_at > now
        submitted: list[str] = []

        def write() -> None:
            try:
                existing = ledger.keyed(self._storage, thread, key, input_digest)
            except Conflict as exc:
                raise ValidationFailed(f"submit: {exc.message}", field="key") from None
            if existing is not None:
                submitted.append(existing.id)
            elif later:
                assert due_at is not None
                delayed.insert(self._storage, submission_id=made, thread_id=thread,
                               agent=chosen, idempotency_key=key, input_json=input_json,
                               input_digest=input_digest, due_at=due_at, now=now)
                self._gate.schedule_fact(DELAYED, due_at)
                submitted.append(made)
            else:
                ledger.enqueue(self._storage, submission_id=made, thread_id=thread,
                               agent=chosen, idempotency_key=key, input_json=input_json,
                               input_digest=input_digest, now=now, not_before=due_at)
                self._gate.record_admission([thread])
                submitted.append(made)
            self._journal(name, position, StepEffect.IDEMPOTENT, StepState.FINISHED,
                          value_json=encode_json({"id": submitted[-1], "thread": thread,
                                                  "not_before": due_at}))

        self._write(write)
        return submitted[-1]

    async def followups(self) -> list[Followup]:
        """Take the input submitted to this Thread since the last call (or since the
        submission was queued): a list of :class:`~threadline.Followup` (``submission_id``,
        ``input``), oldest first, empty when nothing new waits.

        Only for an agent registered with ``join_followups=True`` (otherwise
        ``ValidationFailed`` fails the Attempt for good). What it returns is joined into this
        submission: those submissions go ``joined``, do not run on their own, and settle with
        this one's outcome. It takes the queued input right behind this submission for the
        same agent, up to the first that is not (another agent's input stays FIFO), at most
        ``MAX_FOLLOWUPS`` per call. Each call is journaled (``followups``, ``followups#2``...)
        in the transaction that joins its list, so a replay of the Attempt gets the same list
        back, the empty one too, and nothing is joined twice or lost. See
        :mod:`threadline.threads.followups` for the rules around aborts, retries and Unknown
        Outcomes.
        """
        key = self._key("followups")
        position = self._next_position()
        entry = journal.read_entry(self._storage, self.submission_id, key)
        if entry is not None and entry.state is StepState.FINISHED:
            return followups.replayed(self._storage, self.submission_id, entry.value["ids"])
        if not self._join_followups:
            raise ValidationFailed(
                f"agent {self._claim.submission.agent!r} was not registered with"
                " join_followups=True", field="followups")
        await self._boundary()
        taken: list[Followup] = []

        def write() -> None:
            taken[:] = followups.join(self._storage, self._claim.submission,
                                      now=self._clock.now_ms(), limit=MAX_FOLLOWUPS)
            value_json = encode_json({"ids": [item.submission_id for item in taken]})
            self._journal(key, position, StepEffect.IDEMPOTENT, StepState.FINISHED,
                          value_json=value_json)

        self._write(write)
        await self._failpoints.reached(FOLLOWUPS_JOINED)
        return list(taken)

    async def approval(self, key: str, payload: JsonValue = None) -> ApprovalDecision:
        """Wait durably until someone decides the approval ``key``; return the decision.

        The first call suspends the submission (the Attempt ends; nothing holds memory or an
        alarm while it waits). Once decided, the submission runs again and this call returns
        the decision. Keys name one approval per submission: asking again returns the same
        decision.
        """
        _checked(lambda: check_id(key, field="key"))
        self._next_position()
        wait = waits.find(self._storage, self.submission_id, WaitKind.APPROVAL, key)
        if wait is not None and wait.state is WaitState.RESOLVED:
            decided = wait.decision if isinstance(wait.decision, dict) else {}
            return ApprovalDecision(bool(decided.get("approved")), decided.get("payload"))
        payload_json = self._encode_or_fail(payload, field="approval payload")
        await self._boundary()
        raise Suspend(WaitKind.APPROVAL, key, payload_json=payload_json)

    async def sleep(self, duration: timedelta | float) -> None:
        """Wait durably: a timer on the native lane, not a coroutine.

        ``duration`` is a ``timedelta`` or a number of seconds (an ``int`` or a finite
        ``float``, as for :func:`asyncio.sleep`), from 0 up to ``MAX_SLEEP_SECONDS`` (366
        days); the timer keeps whole milliseconds, a fraction of one rounds up. Anything else
        (a negative, NaN, an infinity, a bool, a longer wait) raises ``ValidationFailed``
        naming the rule, which fails the Attempt for good.
        """
        ms = _checked(lambda: sleep_ms(duration))
        key = self._key("sleep")
        self._next_position()
        if ms == 0:
            return
        wait = waits.find(self._storage, self.submission_id, WaitKind.TIMER, key)
        now = self._clock.now_ms()
        if wait is not None:
            if wait.state is WaitState.RESOLVED:
                return
            wake_at = wait.wake_at if wait.wake_at is not None else now
            if wake_at <= now:
                self._write(lambda: waits.resolve(self._storage, wait.id, decision_json=None,
                                                  now=now))
                return
            raise Suspend(WaitKind.TIMER, key, wake_at=wake_at)
        await self._boundary()
        raise Suspend(WaitKind.TIMER, key, wake_at=now + ms)

    # -- plumbing ----------------------------------------------------------------------------

    def _key(self, base: str) -> str:
        count = self._seen.get(base, 0) + 1
        self._seen[base] = count
        return base if count == 1 else f"{base}#{count}"

    def _next_position(self) -> int:
        self._position += 1
        return self._position

    async def _boundary(self) -> None:
        """Before new durable work: observe an accepted abort and the yield deadline."""
        if self._revoked:
            raise LeaseLost(self.submission_id)
        if self.aborted:
            raise AbortObserved(self.submission_id)
        if self._yield_after is not None and self._clock.now_ms() >= self._yield_after:
            raise YieldNow(self.submission_id)

    def _encode(self, value: JsonValue, *, field: str) -> str:
        return encode_json(value, field=field, max_depth=self._config.max_json_depth,
                           max_bytes=self._config.max_value_bytes)

    def _encode_or_fail(self, value: JsonValue, *, field: str) -> str:
        """``value`` as JSON within the configured limits; a value outside them raises
        ``ValidationFailed`` (``ValueTooLarge``), which fails the Attempt for good: running
        the agent again would produce it again."""
        return self._encode(value, field=field)

    def _record_failure(
        self, key: str, position: int, effect: StepEffect, exc: BaseException
    ) -> None:
        error_json = encode_json(error_envelope(exc, attempt=self.attempt))
        self._write(lambda: self._journal(
            key, position, effect, StepState.FAILED, error_json=error_json))
        self._unsettled.discard(key)

    def _journal(
        self,
        key: str,
        position: int,
        effect: StepEffect,
        state: StepState,
        *,
        value_json: str | None = None,
        error_json: str | None = None,
    ) -> None:
        journal.record(
            self._storage, self.submission_id, key, position=position, effect=effect,
            state=state, attempt=self.attempt, now=self._clock.now_ms(),
            value_json=value_json, error_json=error_json,
        )

    def _write(self, fn: Callable[[], object], *, lanes: tuple[str, ...] = ()) -> None:
        """Commit ``fn`` through the gate, fenced by this Attempt's claim."""

        if self._revoked:
            raise LeaseLost(self.submission_id)

        def fenced() -> None:
            row = self._storage.exec(_FENCE, self.submission_id).first()
            if (
                row is None
                or row["state"] != SubmissionState.RUNNING.value
                or int(row["revision"]) != self._claim.revision
                or row["lease_owner"] != self._claim.lease_owner
            ):
                raise LeaseLost(self.submission_id)
            fn()

        # Journal writes add no work for anyone else (the claim's lease deadline already stands
        # on the native lane); records and messages are new facts for their lanes.
        try:
            if lanes:
                commit_fact(self._gate, fenced, lanes)
            else:
                self._gate.mutate(fenced, invalidates_recovery=False)
        except StorageValueTooLarge as exc:
            # The same write would be refused again: running the agent again cannot help.
            raise NonRetryable(f"storage refused a value as too large: {exc.message}") from exc


def _checked(check: Callable[[], T], message: str | None = None) -> T:
    """Run a check of an agent's argument; a refusal raises ``ValidationFailed``.

    The runtime fails the Attempt for good on it: the same call would be refused again.
    """
    try:
        return check()
    except ValidationFailed:
        raise
    except ValueError as exc:
        raise ValidationFailed(message or str(exc)) from exc


def _due_ms(not_before: datetime | timedelta | None, now: int) -> int | None:
    """A ``submit`` due time in epoch ms: an aware datetime, or a delay from ``now``."""
    if not_before is None:
        return None
    if isinstance(not_before, timedelta):
        return now + _checked(lambda: sleep_ms(not_before))
    # A time before 1970 is long past: it admits at once, like any past time.
    return delayed.due_of(not_before)


def check_kind(kind: object) -> str:
    """Refuse a record kind outside ``KIND_PATTERN`` or under a reserved prefix."""
    if not isinstance(kind, str) or _KIND.fullmatch(kind) is None:
        raise ValidationFailed(f"kind must match {KIND_PATTERN}", field="kind")
    if kind.startswith(RESERVED_KIND_PREFIXES):
        raise ValidationFailed(f"kind {kind!r} is reserved for the runtime's records",
                               field="kind")
    return kind


def sleep_ms(duration: object) -> int:
    """Whole milliseconds of a sleep, rounded up; see :meth:`Turn.sleep` for what is accepted."""
    if isinstance(duration, timedelta):
        delta = duration
    elif isinstance(duration, (int, float)) and not isinstance(duration, bool):
        if isinstance(duration, float) and not math.isfinite(duration):
            raise ValidationFailed("sleep duration must be finite", field="duration")
        if duration < 0:
            raise ValidationFailed("sleep duration must not be negative", field="duration")
        # Bounded before it is converted: timedelta overflows on a huge number.
        if duration > MAX_SLEEP_SECONDS:
            raise ValidationFailed(_SLEEP_BOUND, field="duration")
        # Through timedelta (exact microseconds), so 1.1 s is 1100 ms, not 1101.
        delta = timedelta(seconds=duration)
    else:
        raise ValidationFailed("sleep takes a timedelta or a number of seconds",
                               field="duration")
    if delta < timedelta(0):
        raise ValidationFailed("sleep duration must not be negative", field="duration")
    if delta > timedelta(seconds=MAX_SLEEP_SECONDS):
        raise ValidationFailed(_SLEEP_BOUND, field="duration")
    whole, part = divmod(delta, timedelta(milliseconds=1))
    return whole + (1 if part else 0)


_SLEEP_BOUND = f"sleep duration must be at most {MAX_SLEEP_SECONDS} seconds (366 days)"


__all__ = [
    "EMIT_COMMITTED",
    "FOLLOWUPS_JOINED",
    "KIND_PATTERN",
    "MAX_SLEEP_SECONDS",
    "PROPAGATES",
    "RESERVED_KIND_PREFIXES",
    "STEP_FINISHED",
    "STEP_STARTED",
    "Claim",
    "RetryPolicy",
    "Turn",
    "check_kind",
    "sleep_ms",
]
