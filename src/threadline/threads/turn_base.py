"""What every durable operation of a Turn stands on, and steps, the first of them.

:class:`TurnBase` holds an Attempt's claim and fences every write with it, gives each call its
journal key and position, checks the abort intent and the yield deadline at each boundary, and
runs steps: journaled calls of the agent's functions, tried again in the Attempt as their
:class:`RetryPolicy` says. :class:`~threadline.threads.turn.Turn` adds the other operations.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Container, Set
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.environment import Environment
from threadline.errors import (
    Evicted,
    NonRetryable,
    RetryAfter,
    StorageValueTooLarge,
    ValidationFailed,
)
from threadline.fetching import FetchPort
from threadline.storage.port import Storage
from threadline.threads import journal, waits
from threadline.threads.abort_watch import AbortRead, AbortWatch
from threadline.threads.history import append_history
from threadline.threads.live_text import LiveState, LiveStreams
from threadline.threads.model import (
    JsonValue,
    StepEffect,
    StepState,
    Submission,
    SubmissionState,
    WaitKind,
    check_id,
    decode_json,
    encode_json,
    error_envelope,
)
from threadline.threads.ports import PUBLICATION, Failpoints, MutationGate, commit_fact
from threadline.threads.retry_policy import (
    MAX_BACKOFF,
    MAX_STEP_DELAY_MS,
    MAX_STEP_TRIES,
    RetryPolicy,
)
from threadline.threads.signals import (
    AbortObserved,
    ControlSignal,
    LeaseLost,
    StepInFlight,
    Suspend,
    YieldNow,
)
from threadline.threads.turn_http import TurnHttp
from threadline.threads.turn_stream import StepTry

T = TypeVar("T")

_FENCE = "SELECT state, revision, lease_owner FROM tl_submissions WHERE id = ?"

STEP_STARTED = "step:started"
STEP_FINISHED = "step:finished"

#: What may leave an Attempt as it is: the runtime's signals, a (simulated) eviction, and a
#: cancellation. Anything else an agent raises fails the Attempt, ``SystemExit`` and
#: ``KeyboardInterrupt`` too: nothing in the platform stops Python code that way, so one is the
#: agent's (or a library's) doing, and letting it out would take the alarm down with every
#: other Thread's Attempt.
PROPAGATES = (ControlSignal, Evicted, asyncio.CancelledError)

#: A :class:`~threadline.RetryAfter` of at most this long is waited inside the Attempt; a
#: longer one suspends it on a durable timer.
INLINE_WAIT_MS = 5_000
#: The try of a step whose function is running in this context (tasks it starts inherit it):
#: what ``turn.http`` checks before it sends anything, and where ``emit`` and ``stream`` put
#: their records until the step commits.
_RUNNING_STEP: ContextVar[StepTry | None] = ContextVar("threadline_running_step", default=None)
#: A step's try may hold records of this many times ``max_value_bytes`` together.
STEP_RECORD_BYTES_FACTOR = 4


def _wait_key(step_key: str, number: int) -> str:
    """The timer of a step's ``number``-th durable ``RetryAfter`` wait."""
    return f"{step_key}~retry_after#{number}"


@dataclass(frozen=True, slots=True)
class Claim:
    """The claim an Attempt holds: the submission as claimed and the lease that fences it."""

    submission: Submission
    lease_owner: str
    revision: int
    #: What the Attempt last read of its abort intent (first: the claim's own UPDATE). None:
    #: unknown, read at the first check.
    abort: AbortRead | None = None
    #: The unfixable errors its steps let out after retrying them as their ``RetryPolicy``'s
    #: ``retry_unfixable`` asked: the Attempt they end is retried, not final.
    retried_unfixable: list[BaseException] = field(default_factory=list)

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


class TurnBase:
    """An Attempt's claim, journal and steps: the base of :class:`~threadline.threads.turn.Turn`."""

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
        env: Environment | None = None,
        fetch: FetchPort | None = None,
        live: LiveStreams | None = None,
        parse_input: Callable[[JsonValue], Any] | None = None,
    ) -> None:
        self._claim = claim
        self._env = env if env is not None else Environment()
        self._http = TurnHttp(fetch, lambda: self._running_try() is not None, clock)
        #: The object's streams in flight (``turn.stream``), and how many this Turn opened.
        self._live = live if live is not None else LiveStreams()
        self._streams_opened = 0
        # The agent's input model, if it has one: ``input`` is parsed by it, once.
        self._parse_input = parse_input
        self._parsed: list[Any] = []
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
    def env(self) -> Environment:
        """The Worker's environment, read-only: ``turn.env.OPENAI_API_KEY`` reads a secret,
        ``turn.env.get("NAME")`` one that may be unset (see :class:`threadline.Environment`).

        A secret is read fresh in each Attempt and is never journaled: put what you read from
        it into a step's arguments only if it may be stored.
        """
        return self._env

    @property
    def http(self) -> TurnHttp:
        """The object's HTTP client for this Turn's steps (see
        :class:`~threadline.threads.turn_http.TurnHttp`): ``await turn.http.post(url,
        json=...)`` inside a step's function; refused outside one, where its answer would not
        be journaled."""
        return self._http

    @property
    def input(self) -> Any:
        """The submission's input, as admitted: parsed by the agent's input model when it was
        registered with one (``@app.agent(..., input=Model)``), else the JSON value."""
        if self._parse_input is None:
            return self._claim.submission.input
        if not self._parsed:
            self._parsed.append(self._parse_input(self._claim.submission.input))
        return self._parsed[0]

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

    # -- steps -------------------------------------------------------------------------------

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
        effect = checked(lambda: StepEffect(effect), "effect must be idempotent or uncertain")
        # The occurrence suffix ("#2") cannot appear in a name, so no name aliases another
        # step's later occurrence and reads its journal entry.
        checked(lambda: check_id(name, field="step"))
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
        value, done = await self._run(fn, key, position, effect, retry or RetryPolicy())
        try:
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
            # storage refusing the value as too large is final, like the configured limit.
            try:
                seqs = self._commit_step(done, key, position, effect, value_json)
                self._unsettled.discard(key)
            except NonRetryable as refused:
                if effect is StepEffect.UNCERTAIN:
                    self._record_failure(key, position, effect, refused)
                raise
        except BaseException:
            done.abandon(self._live)
            raise
        for record, seq in zip(done.records, seqs, strict=True):
            if record.stream is not None:
                self._live.finish(record.stream, LiveState.CLOSED, seq)
        done.abandon(self._live)  # one opened and never closed (no ``async with``) ends here
        await self._failpoints.reached(STEP_FINISHED)
        return decode_json(value_json)

    def _commit_step(
        self, done: StepTry, key: str, position: int, effect: StepEffect, value_json: str
    ) -> list[int]:
        """Journal the step finished and append the records its try made, in one commit
        (a new fact for the publication lane when there are any); their seqs, in order."""
        seqs: list[int] = []

        def write() -> None:
            self._journal(key, position, effect, StepState.FINISHED, value_json=value_json)
            now = self._clock.now_ms()
            seqs[:] = [append_history(self._storage, record_id=record.record_id,
                                      thread_id=self.thread_id,
                                      submission_id=self.submission_id, kind=record.kind,
                                      body_json=record.body_json, now=now)
                       for record in done.records]

        self._write(write, lanes=(PUBLICATION,) if done.records else ())
        return seqs

    async def _run(
        self,
        fn: Callable[[], Any],
        key: str,
        position: int,
        effect: StepEffect,
        policy: RetryPolicy,
    ) -> tuple[Any, StepTry]:
        """Call ``fn`` until it returns or ``policy`` stops retrying it: its value, and the
        try that returned it (with the records it made, for the step's commit).

        Before each retry the abort intent is read again, and a pause that would end past the
        Attempt's wall bound is not started: the step fails with its last error instead.
        """
        tried = 0
        waited: int | None = None
        while True:
            tried += 1
            attempt = StepTry(self, self.submission_id, key,
                              STEP_RECORD_BYTES_FACTOR * self._config.max_value_bytes)
            try:
                return await self._call(fn, attempt), attempt
            except BaseException as exc:
                # A try that raised commits nothing: its records go, its streams end.
                attempt.abandon(self._live)
                if isinstance(exc, RetryAfter):
                    if waited is None:
                        waited = self._waits_before(key)
                    if policy.waits_for(exc, waited):
                        waited += 1
                        tried -= 1
                        await self._wait_as_asked(exc, key, position, effect, waited)
                        continue
                if not isinstance(exc, Exception):
                    # A foreign BaseException also means the function returned control; a
                    # signal, an eviction or a cancellation leaves it in flight.
                    if effect is StepEffect.UNCERTAIN and not isinstance(exc, PROPAGATES):
                        self._record_failure(key, position, effect, exc)
                    raise
                if policy.retries(exc, tried) and await self._paused(policy, tried):
                    continue
                if effect is StepEffect.UNCERTAIN:
                    # It returned control, so it is no longer in flight: not Unknown.
                    self._record_failure(key, position, effect, exc)
                if self.aborted:
                    raise AbortObserved(self.submission_id) from exc
                if policy.retries_unfixable(exc):
                    self._claim.retried_unfixable.append(exc)
                raise

    async def _call(self, fn: Callable[[], Any], attempt: StepTry) -> Any:
        """Call a step's function as the try ``attempt`` (what ``http``, ``emit`` and
        ``stream`` find while it runs)."""
        marked = _RUNNING_STEP.set(attempt)
        try:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
            return value
        finally:
            _RUNNING_STEP.reset(marked)

    async def _paused(self, policy: RetryPolicy, tried: int) -> bool:
        """Pause before try ``tried + 1``; False (no pause) when it would end past the
        Attempt's wall bound or an abort was accepted, before or during it."""
        wake = self._clock.now_ms() + policy.delay_ms(tried)
        if (self._deadline is not None and wake >= self._deadline) or self.aborted:
            return False
        await self._clock.sleep_until(wake)
        return not self.aborted

    async def _wait_as_asked(
        self, asked: RetryAfter, key: str, position: int, effect: StepEffect, waited: int
    ) -> None:
        """Wait as a ``RetryAfter`` asks before the step's function runs again: in the
        Attempt when the wait is short and ends within its bound, else on a durable timer
        (the Attempt suspends; the submission runs again once it is due, and the step, not
        finished, calls its function again)."""
        wake = self._clock.now_ms() + asked.delay_ms
        if asked.delay_ms <= INLINE_WAIT_MS and (self._deadline is None or wake < self._deadline):
            await self._clock.sleep_until(wake)
            if self.aborted:
                raise AbortObserved(self.submission_id) from asked
            return
        if effect is StepEffect.UNCERTAIN:
            # The provider refused the call, so it is not in flight while the timer runs.
            self._record_failure(key, position, effect, asked)
        raise Suspend(WaitKind.TIMER, _wait_key(key, waited), wake_at=wake) from asked

    def _waits_before(self, key: str) -> int:
        """How many durable ``RetryAfter`` timers the step ``key`` waited on in earlier
        Attempts: their keys are numbered from 1, so the first number not found ends it."""
        waited = 0
        while waits.find(self._storage, self.submission_id, WaitKind.TIMER,
                         _wait_key(key, waited + 1)) is not None:
            waited += 1
        return waited

    # -- plumbing ----------------------------------------------------------------------------

    def _running_try(self) -> StepTry | None:
        """The try of this Turn's step whose function is running here, if any."""
        running = _RUNNING_STEP.get()
        return running if running is not None and running.owner is self else None

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


def checked(check: Callable[[], T], message: str | None = None) -> T:
    """Run a check of an agent's argument; a refusal raises ``ValidationFailed``.

    The runtime fails the Attempt for good on it: the same call would be refused again.
    """
    try:
        return check()
    except ValidationFailed:
        raise
    except ValueError as exc:
        raise ValidationFailed(message or str(exc)) from exc


__all__ = [
    "MAX_BACKOFF",
    "MAX_STEP_DELAY_MS",
    "MAX_STEP_TRIES",
    "PROPAGATES",
    "STEP_FINISHED",
    "STEP_STARTED",
    "Claim",
    "RetryPolicy",
    "TurnBase",
    "checked",
]
