"""``Turn``: what an agent sees of its submission during one Attempt.

Everything an agent does through a Turn is durable and replayable. Each call gets a key from its
kind, name and occurrence (``step:plan``, ``step:plan#2``, ``emit#1``...), so an Attempt that
runs the agent again from the top, after a crash, a retry or a wait, meets its earlier work in
the same order and gets the recorded answers back instead of repeating it. Agents must therefore
be deterministic apart from what they do inside steps.

Every boundary (a step, emit, send, approval, sleep or followups call that has not happened
yet) first checks the submission's abort intent and the pass's yield deadline, and every write
is fenced by the Attempt's claim: an Attempt that lost its lease cannot write anything more.
That claim, the journal's keys and steps are :class:`~threadline.threads.turn_base.TurnBase`'s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from threadline.clock import to_epoch_ms
from threadline.errors import Conflict, ValidationFailed
from threadline.threads import (
    agent_choice,
    delayed,
    followups,
    history,
    journal,
    ledger,
    message_rows,
    waits,
)
from threadline.threads.followups import MAX_FOLLOWUPS, Followup
from threadline.threads.live_text import LiveText
from threadline.threads.model import (
    MAX_SLEEP_SECONDS,
    ApprovalDecision,
    JsonValue,
    StepEffect,
    StepState,
    WaitKind,
    WaitState,
    check_id,
    check_space_id,
    decode_json,
    digest,
    encode_json,
)
from threadline.threads.ports import DELAYED, MESSAGES, PUBLICATION
from threadline.threads.records import Record
from threadline.threads.signals import Suspend
from threadline.threads.turn_base import RetryPolicy, TurnBase, checked
from threadline.threads.turn_stream import TextStream

EMIT_COMMITTED = "emit:committed"
FOLLOWUPS_JOINED = "followups:joined"

#: What ``emit(kind=...)`` accepts: a letter, then up to 63 of ``[A-Za-z0-9_.:-]``.
KIND_PATTERN = r"[A-Za-z][A-Za-z0-9_.:-]{0,63}"
#: Record kinds the runtime publishes itself (``submission.settled``, ``approval.requested``,
#: ``approval.decided``, ``subscriber.skipped``) and may add to; an agent's record may not pass
#: for one of them (an operator's skip, with who did it, least of all).
RESERVED_KIND_PREFIXES = ("submission.", "approval.", "subscriber.", "threadline.")

_KIND = re.compile(KIND_PATTERN)


class Turn(TurnBase):
    """One Attempt's view of its submission. Agents receive it as their only argument."""

    # -- durable operations besides steps -----------------------------------------------------

    async def emit(self, record: JsonValue, *, kind: str = "record") -> str:
        """Append ``record`` to the Thread's log; returns its id.

        Outside a step the record and the publication-lane enrollment commit in one
        transaction, and on replay the record is found by its id and not appended again.
        Inside a step's function the record belongs to that try of the step: it commits with
        the step's journal entry, and a try that fails (or never finishes) stores nothing,
        so a retry's records are its own, never taken for the failed try's. ``kind`` matches
        ``KIND_PATTERN`` and does not start with a reserved prefix (``submission.``,
        ``approval.``, ``threadline.``: the runtime's own records); ``record`` fits
        ``max_value_bytes`` and ``max_json_depth``. Otherwise ``ValidationFailed`` fails the
        Attempt for good.
        """
        checked(lambda: check_kind(kind))
        running = self._running_try()
        if running is not None:
            return running.add(kind, self._encode_or_fail(record, field="record"))
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

    def stream(
        self, *, kind: str = "message", meta: dict[str, JsonValue] | None = None
    ) -> TextStream:
        """``async with turn.stream(kind="message") as s: await s.write(delta)`` inside a
        step's function: each delta reaches the Thread's open event streams as it is written
        (an ``event: stream`` with the stream's id and offset), nothing is stored per delta,
        and leaving the block adds ONE record of ``kind`` with the whole text
        (``{"text", "stream", **meta}``) that commits with the step. A reader that connects
        mid-stream gets the text so far, then the deltas. A try that fails, or an Attempt
        lost or ended before the step commits, abandons the stream (its readers are told,
        nothing is stored), and the retry streams under a new id: two tries' text never
        mixes. Outside a step ``ValidationFailed`` fails the Attempt for good."""
        checked(lambda: check_kind(kind))
        running = self._running_try()
        if running is None:
            raise ValidationFailed(
                "turn.stream is used inside a step (await turn.step(name, call)): its record "
                "commits with the step", field="stream")
        if meta is not None and not isinstance(meta, dict):
            raise ValidationFailed("meta must be a dict of JSON values", field="meta")
        self._streams_opened += 1
        entry = LiveText(f"{self.submission_id}.{self._claim.revision}.{self._streams_opened}",
                         self.thread_id, self.submission_id, kind)
        running.streams.append(entry)
        self._live.open(entry)
        return TextStream(self._live, entry, running, encode=self._encode_or_fail,
                          max_bytes=self._config.max_value_bytes, meta=dict(meta or {}))

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
        ``message.failed`` record lands in this Thread's log. It goes one hop further than the
        message this submission came from (1 when it came from none); past
        ``max_message_hops`` it fails that way too (``MessageLoop``). This submission's detail
        lists its messages and their states.
        """
        checked(lambda: check_space_id(space))
        checked(lambda: check_id(thread, field="thread"))
        if agent is not None:
            checked(lambda: check_id(agent, field="agent"))
        message_id = f"{self.submission_id}:{self._key('send')}"
        self._next_position()
        if message_rows.message_exists(self._storage, message_id):
            return message_id
        input_json = self._encode_or_fail(input, field="message input")
        await self._boundary()
        hops = self._claim.submission.message_hops + 1

        def write() -> None:
            message_rows.enqueue_message(
                self._storage, message_id=message_id, from_thread=self.thread_id,
                from_submission=self.submission_id, to_space=space, to_thread=thread,
                input_json=input_json, now=self._clock.now_ms(), agent=agent, hops=hops,
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
        ``ValidationFailed``, which fails the Attempt for good. The new submission carries this
        one's message hop count: a chain of messages that passes through it counts on.
        """
        name = self._key("submit")
        position = self._next_position()
        entry = journal.read_entry(self._storage, self.submission_id, name)
        if entry is not None and entry.state is StepState.FINISHED:
            return str(entry.value["id"])
        checked(lambda: check_id(thread, field="thread"))
        if key is None:
            key = f"{self.submission_id}:{name.replace('#', '.')}"
        checked(lambda: check_id(key, field="key"))
        if agent is not None:
            checked(lambda: check_id(agent, field="agent"))
        if not_before is not None and not isinstance(not_before, datetime | timedelta):
            raise ValidationFailed("not_before is an aware datetime or a timedelta",
                                   field="not_before")
        input_json = self._encode_or_fail(input, field="submission input")
        await self._boundary()
        now = self._clock.now_ms()
        due_at = delayed.check_due(_due_ms(not_before, now), now)
        chosen = (agent or agent_choice.latest_agent(self._storage, thread)
                  or self._claim.submission.agent)
        if chosen not in self._agents:
            raise ValidationFailed(f"agent {chosen!r} is not registered in this deployment",
                                   field="agent")
        check_input = getattr(self._agents, "check_input", None)
        if check_input is not None:
            check_input(chosen, input)
        input_digest = digest(chosen, input_json)
        # Deterministic: this submission's call at this position, so its id is its own.
        made = "sub_" + digest(self.submission_id, name)[:32]
        later = due_at is not None and due_at > now
        submitted: list[str] = []
        # A chain of messages goes on through what its agents submit: the count is carried.
        hops = self._claim.submission.message_hops

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
                               input_digest=input_digest, due_at=due_at, now=now,
                               message_hops=hops)
                self._gate.schedule_fact(DELAYED, due_at)
                submitted.append(made)
            else:
                ledger.enqueue(self._storage, submission_id=made, thread_id=thread,
                               agent=chosen, idempotency_key=key, input_json=input_json,
                               input_digest=input_digest, now=now, not_before=due_at,
                               message_hops=hops)
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

    async def history(
        self,
        *,
        limit: int = 50,
        before: int | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Record]:
        """The Thread's earlier records, for the agent's context: the newest ``limit`` (1 to
        ``MAX_HISTORY_RECORDS``) with a ``seq`` below ``before`` (default: every record the
        log holds when first called), of ``kinds`` only when given, oldest first.

        Bounded in bytes too: only the newest records whose bodies fit in half of
        ``max_value_bytes`` together are returned, so the list is the most recent context
        that fits. Each call is journaled (``history``, ``history#2``...) with the list it
        returned, so a replay of the Attempt gets the same list back even if records were
        appended or retention deleted some since. To page further back, pass the first
        record's ``seq`` as ``before``. A bad argument raises ``ValidationFailed``, failing
        the Attempt for good.
        """
        asked = checked(lambda: _history_query(limit, before, kinds))
        key = self._key("history")
        position = self._next_position()
        entry = journal.read_entry(self._storage, self.submission_id, key)
        if entry is not None and entry.state is StepState.FINISHED:
            return [_record(item) for item in entry.value["records"]]
        await self._boundary()
        taken: list[Record] = []

        def write() -> None:
            rows = history.read_earlier(
                self._storage, self.thread_id, before=asked[1], limit=asked[0],
                kinds_json=asked[2], max_bytes=self._config.max_value_bytes // 2)
            taken[:] = [Record(self.thread_id, int(row["seq"]), row["record_id"],
                               row["submission_id"], row["kind"], decode_json(row["body_json"]),
                               int(row["created_at"])) for row in rows]
            value_json = encode_json({"records": [record.to_json() for record in taken]})
            self._journal(key, position, StepEffect.IDEMPOTENT, StepState.FINISHED,
                          value_json=value_json)

        self._write(write)
        return list(taken)

    async def approval(self, key: str, payload: JsonValue = None) -> ApprovalDecision:
        """Wait durably until someone decides the approval ``key``; return the decision.

        The first call suspends the submission (the Attempt ends; nothing holds memory or an
        alarm while it waits). Once decided, the submission runs again and this call returns
        the decision. Keys name one approval per submission: asking again returns the same
        decision.
        """
        checked(lambda: check_id(key, field="key"))
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
        ms = checked(lambda: sleep_ms(duration))
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


#: An agent: an async function of a Turn returning a JSON value.
AgentFn = Callable[[Turn], Awaitable[Any]]


def _due_ms(not_before: datetime | timedelta | None, now: int) -> int | None:
    """A ``submit`` due time in epoch ms: an aware datetime, or a delay from ``now``."""
    if not_before is None:
        return None
    if isinstance(not_before, timedelta):
        return now + checked(lambda: sleep_ms(not_before))
    # A time before 1970 is long past: it admits at once, like any past time.
    return delayed.due_of(not_before)


#: The most records one ``turn.history`` call returns.
MAX_HISTORY_RECORDS = 500
# The largest ``before``: a seq the log never reaches, and still a number (not a BigInt)
# when bound on the platform.
_MAX_BEFORE = 2**52


def _history_query(
    limit: object, before: object, kinds: object
) -> tuple[int, int | None, str | None]:
    """``turn.history``'s arguments checked: (limit, before, kinds as a JSON array or None)."""
    if (not isinstance(limit, int) or isinstance(limit, bool)
            or not 1 <= limit <= MAX_HISTORY_RECORDS):
        raise ValidationFailed(f"limit must be an integer from 1 to {MAX_HISTORY_RECORDS}",
                               field="limit")
    if before is not None and (not isinstance(before, int) or isinstance(before, bool)
                               or not 1 <= before <= _MAX_BEFORE):
        raise ValidationFailed("before must be a record's seq (a positive integer) or None",
                               field="before")
    if kinds is None:
        return limit, before, None
    if isinstance(kinds, str) or not isinstance(kinds, Sequence) or not kinds:
        raise ValidationFailed("kinds must be a non-empty list of record kinds, or None",
                               field="kinds")
    for kind in kinds:
        if not isinstance(kind, str) or _KIND.fullmatch(kind) is None:
            raise ValidationFailed(f"each of kinds must match {KIND_PATTERN}", field="kinds")
    return limit, before, encode_json(sorted(set(kinds)))


def _record(item: Any) -> Record:
    return Record(item["thread_id"], item["seq"], item["record_id"], item["submission_id"],
                  item["kind"], item["body"], item["created_at"])


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
    "MAX_HISTORY_RECORDS",
    "MAX_SLEEP_SECONDS",
    "RESERVED_KIND_PREFIXES",
    "AgentFn",
    "RetryPolicy",
    "Turn",
    "check_kind",
    "sleep_ms",
]
