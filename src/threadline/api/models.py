"""The HTTP API's request and response bodies, as pydantic models.

Requests are strict (no coercion: ``"true"`` is not a boolean) and refuse unknown members, so a
misspelt field is a 422 naming it rather than a value silently ignored. Responses are built
through these models too, and ``GET /v1/openapi.json`` is generated from them: the document and
the wire cannot drift apart.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from threadline.clock import to_epoch_ms
from threadline.threads.failed_attempts import FAILURES_KEPT
from threadline.threads.failure_log import LISTED_FAILURES
from threadline.threads.model import (
    MAX_ERROR_MESSAGE_CHARS,
    MAX_ERROR_TYPE_CHARS,
    RUNTIME_KEY_PREFIXES,
    is_runtime_key,
)

#: The pattern every id in a path or body follows (``.`` and ``..`` are refused besides).
ID_REGEX = r"^[A-Za-z0-9._:-]{1,128}$"

#: The largest integer every runtime (JavaScript's numbers included) represents exactly.
MAX_SAFE_INTEGER = 2**53 - 1

#: Any JSON value.
Json = Any

#: A submission's state (see ``threadline.threads.SubmissionState``).
StateName = Literal[
    "queued", "ready", "running", "suspended", "unknown", "joined", "terminalizing", "settled"
]
#: What a submission's view shows: its ledger state, or ``scheduled`` while a delayed
#: submission waits for its due time (it has no place in its Thread's FIFO yet).
ViewStateName = Literal[StateName, "scheduled"]
#: The states of an open submission.
OpenStateName = Literal[
    "queued", "ready", "running", "suspended", "unknown", "joined", "terminalizing"
]


# ASCII digits only: ``\d`` alone takes any script's digits (fullwidth, Arabic-Indic...), and
# int() reads them in the fraction.
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)
_DUE_FORMS = ("RFC 3339 with an offset ('2030-01-01T09:00:00Z', '2030-01-01T11:00:00+02:00')"
              " or epoch milliseconds")


def rfc3339_ms(text: str) -> int:
    """An RFC 3339 date-time with an offset, in epoch milliseconds (a fraction rounded up).

    Raises ``ValueError`` for anything else: a time without an offset (naive, it names no
    instant), another format, or a date or time that does not exist.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"must be {_DUE_FORMS}")
    day, clock, fraction, offset = match.groups()
    zone = "+00:00" if offset in ("Z", "z") else offset
    try:
        whole = datetime.fromisoformat(f"{day}T{clock}{zone}")
    except ValueError as exc:
        raise ValueError(f"is not a valid date-time: {exc}") from None
    nanoseconds = int(fraction.ljust(9, "0")) if fraction else 0
    return to_epoch_ms(whole) + -(-nanoseconds // 1_000_000)


def due_from_text(text: str) -> int:
    """A due time given as RFC 3339 text (see :func:`rfc3339_ms`), in epoch milliseconds.

    A time before 1970 is a time long past: like any past time it admits at once, so it is
    taken as 0 (epoch milliseconds count from 1970 here). ``ValueError`` for anything that
    is not such a date-time.
    """
    return max(0, rfc3339_ms(text))


#: A due time as RFC 3339 text (checked by the model that holds it).
DateTimeText = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
#: A due time in epoch milliseconds.
EpochMs = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class _Query(BaseModel):
    # Query strings are text: numbers are parsed from it, so this model is not strict.
    model_config = ConfigDict(extra="ignore")


class _Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- requests ------------------------------------------------------------------------------


class SubmitRequest(_Request):
    """Input for a Thread. ``agent`` defaults to the Thread's last agent, or the only one."""

    agent: str | None = Field(None, pattern=ID_REGEX, description="The agent to run.")
    input: Json = Field(..., description="Any JSON value; the agent receives it as turn.input.")
    idempotency_key: str | None = Field(
        None,
        pattern=ID_REGEX,
        description=(
            "Replays with the same key and input return the first submission, whether it was"
            " admitted at once or is still scheduled; the key with other input is a 409."
            " Keys starting with `schedule:`, `msg:`, `sub_` or `threadline:` are the"
            " runtime's own (422)."
        ),
    )
    not_before: DateTimeText | EpochMs | None = Field(
        None,
        description=(
            "Delay the submission until this time: RFC 3339 with an offset, or epoch"
            " milliseconds. Until then it is `scheduled` and holds no place in the Thread's"
            " FIFO; when it falls due it takes its place behind whatever arrived meanwhile."
            " A time in the past (before 1970 included) admits at once; one more than 366"
            " days ahead is refused."
        ),
    )

    @field_validator("idempotency_key")
    @classmethod
    def _not_the_runtimes(cls, value: str | None) -> str | None:
        if value is not None and is_runtime_key(value):
            raise ValueError(
                "keys starting with " + ", ".join(RUNTIME_KEY_PREFIXES) + " are derived by the"
                " runtime (schedule fires, messages, follow-ups); choose another")
        return value

    @field_validator("not_before", mode="before")
    @classmethod
    def _due_form(cls, value: object) -> object:
        # Checked whole here, so that a refusal names the field itself rather than one of
        # the union's branches; text becomes epoch milliseconds.
        if value is None:
            return None
        if isinstance(value, str):
            return due_from_text(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be {_DUE_FORMS}")
        if not 0 <= value <= MAX_SAFE_INTEGER:
            raise ValueError(f"epoch milliseconds must be from 0 to {MAX_SAFE_INTEGER}")
        return value

    @property
    def due_ms(self) -> int | None:
        """``not_before`` in epoch milliseconds (None when not given)."""
        value = self.not_before
        return due_from_text(value) if isinstance(value, str) else value


class AbortRequest(_Request):
    """Abort a submission; a running Attempt stops at its next step boundary."""

    reason: str | None = Field(None, max_length=2_000)


class ApprovalRequest(_Request):
    """Decide an approval the agent is waiting for."""

    approved: bool
    payload: Json = Field(None, description="Any JSON value handed to the agent.")


class ResolveRequest(_Request):
    """Resolve an Unknown Outcome: run the step again, accept a result for it, or abort."""

    action: Literal["retry", "accept", "abort"]
    result: Json = Field(None, description="The step's result; required with action accept.")


class SkipRequest(_Request):
    """Move a parked or backing-off subscriber past the one record at its cursor."""

    cursor: int = Field(
        ..., ge=0, le=MAX_SAFE_INTEGER,
        description="The subscriber's cursor as the operator read it (`/maintenance`): the"
        " skip is a compare-and-set on it, so a repeated or stale request changes nothing"
        " (409).")
    record_id: str | None = Field(
        None, min_length=1, max_length=1_024,
        description="The id of the record to skip (the one a refusal's `detail` names): when"
        " given, the record at the cursor must be this one (409 otherwise). A required"
        " subscriber held on Threads skips the first record a hold owes (`held_threads[]."
        "record_id`): there it is required, and it, not `cursor`, is the compare-and-set.")


class RestartRequest(_Request):
    """Deliver from a position of the space's log."""

    position: int = Field(
        ..., ge=0, le=MAX_SAFE_INTEGER,
        description="The log position to deliver after: 0 replays the log from its"
        " beginning, the log's end (`log_end` in `/maintenance`) takes only what comes next.")


class ThreadsQuery(_Query):
    """Paging of the Thread list (keyset: the last id of the previous page)."""

    after: str | None = Field(None, pattern=ID_REGEX, description="Start after this Thread id.")
    limit: int = Field(100, ge=1, le=1_000)


class EventsQuery(_Query):
    """Where a new event stream starts (a ``Last-Event-ID`` header takes precedence)."""

    after: int = Field(
        0, ge=0, le=MAX_SAFE_INTEGER, description="Send the records after this history seq."
    )


class HistoryQuery(_Query):
    """Paging of a Thread's history by record sequence number."""

    after: int = Field(0, ge=0, le=MAX_SAFE_INTEGER, description="Start after this history seq.")
    limit: int = Field(100, ge=1, le=1_000)


# -- responses -----------------------------------------------------------------------------


class Health(_Response):
    """The object is up and its schema migrated."""

    status: Literal["ok"]
    schema_version: int


class SubmissionView(_Response):
    """A submission: its input, where it stands, and how it ended."""

    id: str
    thread_id: str
    seq: int | None = Field(
        description="FIFO position in the Thread, from 1; null while `scheduled` (a delayed"
        " submission takes its place when it falls due).")
    agent: str
    idempotency_key: str | None
    state: ViewStateName = Field(
        description="Where it stands; `scheduled` until a delayed submission falls due.")
    outcome: Literal["completed", "failed", "aborted"] | None
    input: Json
    result: Json
    error: Json = Field(
        description=(
            "The latest failure, or why the latest Attempt was lost (`AttemptLost`, with its"
            " `cause`), or what a settled submission failed or was aborted with."
        )
    )
    attempts: int = Field(
        description=(
            "Attempts started (a wait or a yield gives its one back); while one runs, its"
            " `turn.attempt`. Those lost without failing (`losses.total` in the detail) are"
            " not charged against `max_attempts`."
        )
    )
    not_before: int | None = Field(
        description="Epoch ms before which no Attempt starts: a delayed submission's due time,"
        " or a retry's backoff.")
    lease_expires_at: int | None
    created_at: int
    updated_at: int
    settled_at: int | None
    submitted_by: str | None = Field(
        description=(
            "Who submitted it: the subject of the principal whose request admitted it, as the"
            " Worker named it. Null when unknown (a principal without a subject) and when no"
            " principal submitted it: a message from another Thread (`turn.send`), a"
            " schedule's run, an agent's own admission."
        )
    )
    message_from: str | None = Field(
        None,
        description=(
            "For a submission admitted from a message (`turn.send`): where it was sent,"
            " `<space>/<thread>`, as the sending space's object named them. Null otherwise."
        ),
    )


class WaitView(_Response):
    """Something a submission waited or waits for: an approval, a timer, an Unknown Outcome."""

    kind: Literal["approval", "timer", "unknown", "event"]
    key: str
    state: Literal["open", "resolved", "cancelled"]
    payload: Json
    decision: Json
    wake_at: int | None
    created_at: int
    resolved_at: int | None
    decided_by: str | None = Field(
        description=(
            "Who resolved it: the subject of the principal that decided the approval or"
            " resolved the Unknown Outcome (`decision` holds what they decided). Null while"
            " open, when unknown, and for a wait no principal resolves (a timer, a wait"
            " cancelled by the settlement)."
        )
    )


class JournalStepView(_Response):
    """One journaled step, without its value."""

    key: str
    position: int
    effect: Literal["idempotent", "uncertain"]
    state: Literal["started", "finished", "failed"]
    attempt: int
    started_at: int
    finished_at: int | None


class JournalSummary(_Response):
    """How far the submission's durable work got."""

    steps: int
    finished: int
    failed: int
    in_flight: int = Field(description="Steps started and not finished (uncertain steps only).")
    entries: list[JournalStepView]


class AbortView(_Response):
    """The submission's abort intent."""

    state: Literal["requested", "accepted", "applied"]
    reason: str | None
    requested_at: int
    applied_at: int | None
    requested_by: str | None = Field(
        description=(
            "Who requested it: the subject of the principal whose abort (or Unknown Outcome"
            " resolution by `abort`) made it; null when unknown. A later abort request changes"
            " nothing: the first is kept."
        )
    )


class LossesView(_Response):
    """Attempts of the submission lost without failing; none of them spent ``max_attempts``."""

    total: int = Field(description="Attempts lost so far.")
    in_a_row: int = Field(
        description=(
            "Losses in a row at journal position `position`: no step finished and no Attempt"
            " ended otherwise (suspended, yielded, failed, settled, left an Unknown Outcome)"
            " between them, so 0 once one did; at `max_consecutive_losses` the submission"
            " settles failed (`CrashLoop`)."
        )
    )
    position: int | None = Field(
        description=(
            "Journal position of the latest loss: the latest finished step's then (0: none)."
        )
    )
    last_cause: Literal["reset", "interrupted", "lease-expired"] | None = Field(
        description=(
            "Why the latest was lost: `reset`, the object was reset under it (a deploy, an"
            " eviction, a crash); `interrupted`, the alarm event ended while it ran;"
            " `lease-expired`, a claim naming no incarnation outlived its lease."
        )
    )


class FailedAttemptView(_Response):
    """The error one failed Attempt ended with."""

    attempt: int | None = Field(description="The Attempt's number (`turn.attempt`).")
    type: str = Field(
        description=f"The exception's type name (at most {MAX_ERROR_TYPE_CHARS} characters).")
    message: str = Field(
        description=f"Its message, cut at {MAX_ERROR_MESSAGE_CHARS} characters as `error`'s is"
        " (noting the full length).")
    at: int = Field(description="When the Attempt's end was recorded (epoch ms).")
    final: bool = Field(description="The submission failed with it.")
    retry_at: int | None = Field(
        description=(
            "When its retry was due (epoch ms): null when final, when it ran again at once,"
            " and when an uncertain step was in flight (an Unknown Outcome, see `waits`)."
        )
    )


class FailuresView(_Response):
    """Attempts of the submission that failed (lost ones are counted in `losses`), with the
    error of the first and of the latest ones."""

    total: int = Field(description="Attempts failed so far.")
    dropped: int = Field(
        description="Failed Attempts not listed: those between the first and the latest"
        f" {FAILURES_KEPT - 1}.")
    attempts: list[FailedAttemptView] = Field(
        description=f"The first failed Attempt and the latest ones (at most {FAILURES_KEPT}),"
        " oldest first.")


class MessageView(_Response):
    """A message the submission sent with ``turn.send``, and where its delivery stands."""

    id: str = Field(description="Stable across replays: `<submission id>:send`, `...:send#2`.")
    to_space: str
    to_thread: str
    agent: str | None = Field(
        description="The agent named to run it (null: the target Thread's latest, else its"
        " only one).")
    state: Literal["pending", "delivered", "failed"]
    attempts: int = Field(description="Deliveries tried into another space.")
    next_attempt_at: int | None = Field(description="When a pending message goes next.")
    error: str | None = Field(
        description="Why it failed for good (`failed`), or its latest transient failure.")
    submission_id: str | None = Field(
        description="The submission it became in its target Thread, once delivered.")
    created_at: int
    delivered_at: int | None
    failed_at: int | None


class SubmissionDetail(SubmissionView):
    """A submission with its waits, journal summary, abort intent, failed and lost Attempts
    and the messages it sent."""

    waits: list[WaitView]
    journal: JournalSummary
    abort: AbortView | None
    losses: LossesView
    failures: FailuresView
    joined_to: str | None = Field(
        description=(
            "The submission this one was joined into as follow-up input (`turn.followups()`"
            " of an agent registered with `join_followups=True`), kept once it settles; null"
            " for input that ran on its own. A joined submission (state `joined`) does not run"
            " on its own: it settles with that submission's outcome, and aborting it alone is"
            " a 409 (abort that submission instead)."
        ),
    )
    messages: list[MessageView] = Field(
        description="The messages it sent (at most 100), in the order it sent them.")


class OpenSubmission(_Response):
    """An open submission of a Thread, control fields only."""

    id: str
    seq: int
    agent: str
    state: OpenStateName
    attempts: int
    not_before: int | None
    lease_expires_at: int | None


class ScheduledItem(_Response):
    """A delayed submission of a Thread that has not fallen due yet."""

    id: str
    agent: str
    state: Literal["scheduled"]
    not_before: int = Field(description="When it falls due (epoch ms).")
    created_at: int


class _ThreadCounts(_Response):
    id: str
    submissions: int = Field(description="Submissions ever admitted.")
    open_submissions: int
    history_seq: int = Field(description="Seq of the newest history record (0: none).")


class ThreadItem(_ThreadCounts):
    """A Thread in the list (only Threads something was admitted to are listed)."""

    created_at: int
    updated_at: int


class ThreadPage(_Response):
    """A page of Threads; ``next`` is the ``after`` of the next page, null on the last."""

    threads: list[ThreadItem]
    next: str | None


class ThreadSummary(_ThreadCounts):
    """A Thread with its open submissions in FIFO order (the first 100; the count is exact).

    A Thread exists for reading once it is named: before its first submission it is empty,
    with zero counts and null timestamps.
    """

    created_at: int | None = Field(
        description="When its first submission was admitted; null before that."
    )
    updated_at: int | None = Field(
        description="When it last changed; null before its first submission."
    )
    open: list[OpenSubmission]
    scheduled: list[ScheduledItem] = Field(
        description="Delayed submissions that have not fallen due, soonest first (the first"
        " 100). Not counted in `submissions` or `open_submissions` until they take their"
        " place in the FIFO.")


class HistoryRecord(_Response):
    """One canonical record of a Thread."""

    seq: int
    record_id: str
    submission_id: str | None
    kind: str
    body: Json
    created_at: int


class HistoryPage(_Response):
    """A page of history; ``next`` is the ``after`` of the next page, null on the last.

    A page holds at most ``limit`` records and about 1 MiB of record bodies (a record larger
    than that comes alone): a page of large records ends early, with ``next`` set."""

    thread_id: str
    records: list[HistoryRecord]
    next: int | None
    first_kept: int | None = Field(
        None,
        description=(
            "Set when the records after `after` up to `first_kept - 1` were deleted by"
            " retention (`retention_ms`): the seq of the first record still kept, where this"
            " page starts. Null when nothing between `after` and the page was deleted."
        ),
    )


class ApprovalView(_Response):
    """A decided approval and the submission's state after the decision."""

    submission_id: str
    key: str
    approved: bool
    payload: Json
    state: StateName


class LaneView(_Response):
    """One maintenance lane of the due queue."""

    id: str
    state: Literal["idle", "due", "parked"]
    due_at: int | None
    not_before: int
    stalls: int
    revision: int
    reported: bool
    cursor: int


class NativeRetryView(_Response):
    """A durable backoff of native work for one generation."""

    generation: int
    not_before: int
    native_only: bool
    stalls: int


class GenerationView(_Response):
    """The generation record: whether the object owes native work."""

    dirty: int
    processed: int
    caught_up: bool = Field(description="processed >= dirty with no native retry pending.")
    nonterminal: int
    last_served_thread: str | None
    last_recovered_thread: str | None
    last_after_native_lane: str | None
    binding_registry_key: str | None
    retry: NativeRetryView | None
    recovery_event_seq: int
    recovery_event_ack: int


class FaultView(_Response):
    """A Thread whose recovery is blocked."""

    model_config = ConfigDict(extra="allow")

    thread_id: str
    attempts: int
    first_failed_at: int
    last_failed_at: int
    retry_at: int | None
    failure: Json


class BindingWaitView(_Response):
    """A submission parked because its agent is not registered in this deployment."""

    model_config = ConfigDict(extra="allow")

    submission_id: str
    thread_id: str
    agent: str
    since: int


class PassFailedAttemptView(_Response):
    """An Attempt that failed while a pass ran: whose it was and the error's type."""

    submission_id: str
    thread_id: str
    agent: str
    attempt: int
    error_type: str = Field(description="The exception's type name (see the submission's"
                            " `failures` for its message).")


class PassReportView(_Response):
    """What one maintenance pass did."""

    model_config = ConfigDict(extra="allow")

    phase: Literal["caught-up", "actionable", "failed"]
    alarm: Literal["rearmed", "cleared"] | None = Field(
        description="The pass's alarm decision; none for a failed pass.")
    recovered: int
    settled: int
    nonterminal: int
    rows_read: int
    rows_written: int
    duration_ms: int
    failure_type: str | None = Field(
        None, description="Why the pass itself failed (its exception's type); null unless"
        " `phase` is `failed`. An Attempt that failed is in `failed_attempts` instead.")
    attempts_failed: int = Field(
        0, description="Attempts that failed while the pass ran (their agents raised).")
    failed_attempts: list[PassFailedAttemptView] = Field(
        default_factory=list,
        description=f"The latest of those (at most {LISTED_FAILURES}), oldest first.")


class ScheduleErrorView(_Response):
    """The latest failed run of a schedule."""

    type: str = Field(description="The exception's type, or `Cancelled` for an overrun.")
    message: str = Field(description="The exception's message (at most 2,000 characters).")
    at: int = Field(description="When the run failed (epoch ms).")
    fire: int | None = Field(description="The fire time that run served (epoch ms).")


class ScheduleView(_Response):
    """One declared schedule: when it fires, when it last did, and how it is doing."""

    id: str
    kind: Literal["every", "cron"]
    expression: str | None = Field(description="The cron expression (cron schedules).")
    interval_ms: int | None = Field(description="The interval (every schedules).")
    tz: str | None = Field(description="The cron expression's time zone (cron schedules).")
    dispatch_timeout_ms: int = Field(description="The allowance of one run.")
    state: Literal["scheduled", "running", "retrying", "parked"] = Field(
        description="`scheduled`: waiting for its next fire. `running`: a fire is recorded and"
        " its run has not failed (it runs, or runs again after a loss of the object)."
        " `retrying`: the pending fire's run failed and is retried with backoff until the next"
        " fire supersedes it. `parked`: its runs failed `park_after_stalls` times in a row;"
        " retried hourly, and still at each next fire."
    )
    next_fire: int = Field(description="The next fire time (epoch ms), durable.")
    due_at: int | None = Field(
        description="When the schedule's lane is due next (a retry may come before next_fire)."
    )
    pending_fire: int | None = Field(
        description="The fire time recorded for a run that has not completed (epoch ms)."
    )
    failures: int = Field(description="Failed runs of the pending fire.")
    last_fire: int | None = Field(description="The fire time of the last completed run.")
    last_ended_at: int | None = Field(description="When the last completed run ended.")
    last_error: ScheduleErrorView | None = Field(
        description="The latest failed run, kept after later runs succeed."
    )


class ScheduleList(_Response):
    """The space's declared schedules, by id."""

    schedules: list[ScheduleView]


class HostLaneView(_Response):
    """One host lane the application declares, with its due-queue state."""

    id: str
    phase: Literal["concurrent", "after-native"]
    dispatch_timeout_ms: int
    state: Literal["idle", "due", "parked"]
    due_at: int | None
    stalls: int


class HeldThreadView(_Response):
    """A Thread a required subscriber failed on: its records from ``since_seq`` on are owed
    and delivered on their own, while the other Threads' records go on."""

    thread: str
    since_seq: int = Field(description="The first record of the Thread it has not consumed.")
    record_id: str | None = Field(
        None, description="The first record it owes of this Thread, among the kinds it wants"
        " (what `POST .../skip` names to move past it); null when none was found.")
    state: Literal["backing-off", "parked"] = Field(
        description="`backing-off`: retried at `retry_at`. `parked`: its destination refused"
        " a batch of this Thread for good (`detail`); an operator resumes it or skips"
        " `record_id` (`POST .../resume`, `/skip`), or a deploy that bumps the subscriber's"
        " version delivers again.")
    failures: int
    retry_at: int | None
    error_type: str | None
    error: str | None
    detail: str | None
    failed_at: int


class SubscriberView(_Response):
    """One subscriber the application declares: its cursor over the log and how it is doing."""

    name: str
    kinds: list[str] | None = Field(description="The record kinds it gets (null: every kind).")
    required: bool = Field(
        description="Whether native work of a Thread waits until it consumed that Thread's"
        " records.")
    version: int
    batch: int
    batch_bytes: int = Field(
        description="The bound of one batch in bytes (its records as JSON); a record larger"
        " than it goes alone.")
    oversize: str = Field(
        description="What a record too large for the destination does (a Queue's message"
        " limit, a receiver refusing a large body).")
    dispatch_timeout_ms: int
    state: Literal["delivering", "caught-up", "backing-off", "parked"] = Field(
        description="`caught-up`: nothing past its cursor. `delivering`: records wait and it can"
        " take them. `backing-off`: its last delivery failed; retried at `retry_at` (a required"
        " subscriber: the Threads in `held_threads`, the others' records go on). `parked`: its"
        " destination refused a batch for good (`detail`; a required subscriber: of a Thread in"
        " `held_threads`, parked on that Thread alone); an operator resumes it, skips the"
        " record at its cursor or restarts it from a position (`POST .../subscribers/{name}/"
        "resume`, `/skip`, `/restart`), or a deploy that bumps its version delivers the log"
        " again."
    )
    cursor: int = Field(description="The log position of the last record it consumed.")
    log_end: int = Field(description="The log position of the space's newest record.")
    delivered: int = Field(description="Batches delivered since its version started.")
    delivered_at: int | None
    failures: int = Field(description="Failed deliveries in a row.")
    retry_at: int | None
    error_type: str | None
    error: str | None
    detail: str | None = Field(description="What the refusal that parked it kept.")
    failed_at: int | None
    waiting_threads: list[str] = Field(
        description="Required subscribers: the Threads whose native work waits for it.")
    waiting_submissions: list[str] = Field(
        description="Required subscribers: the open submissions of those Threads.")
    held_threads: list[HeldThreadView] = Field(
        description="Required subscribers: the Threads it failed on, each held alone (its"
        " native work waits) while the others' records go on.")


class SkippedRecordView(_Response):
    """The record an operator made a subscriber skip."""

    subscriber: str
    thread_id: str
    seq: int
    record_id: str
    kind: str
    submission_id: str | None = None
    position: int = Field(description="Its position in the space's log: the new cursor.")


class SubscriberSkip(_Response):
    """A subscriber after a skip, and the record it skipped (also in its Thread's log as a
    `subscriber.skipped` record naming who skipped it)."""

    subscriber: SubscriberView
    skipped: SkippedRecordView


class MaintenanceView(_Response):
    """The object's maintenance state: lanes, generation, alarm, faults, recent passes,
    schedules and host lanes."""

    alarm: int | None = Field(description="The alarm slot as this object last wrote or read it.")
    lanes: list[LaneView]
    generation: GenerationView
    faults: list[FaultView]
    binding_waits: list[BindingWaitView]
    pass_reports: list[PassReportView] = Field(
        description="Newest first: the actionable and failed passes of the object's current"
        " incarnation (kept in memory), then the failed passes of earlier incarnations (stored)."
        " Caught-up passes are not listed."
    )
    schedules: list[ScheduleView] = Field(
        description="The schedules this deployment declares (`@app.every`, `@app.cron`), by id."
    )
    host_lanes: list[HostLaneView] = Field(
        description="The host lanes this deployment declares (`@app.lane`), by id."
    )
    subscribers: list[SubscriberView] = Field(
        default_factory=list,
        description="The subscribers this deployment declares (`@app.subscriber`), by name.",
    )


class FieldError(_Response):
    """One offending field of a refused request."""

    field: str
    message: str


class Problem(BaseModel):
    """An RFC 9457 problem: ``type`` is a stable URN, ``detail`` names the offending field."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str | None = None
    field: str | None = None
    errors: list[FieldError] | None = None


# -- revocations ---------------------------------------------------------------------------

#: A scoped token's id, as ``POST /v1/tokens`` answers it (``token_id``).
TokenId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")]


class RevokeRequest(_Request):
    """What to revoke in this space: one token (and every token minted from it), or every
    token of one subject issued before a time."""

    token_id: TokenId | None = Field(
        None, description="The token to revoke, with every token minted from it.")
    subject: str | None = Field(
        None, min_length=1, max_length=256,
        description="Revoke every token of this subject issued before `issued_before` (and"
                    " every token minted from one of them).")
    issued_before: DateTimeText | EpochMs | None = Field(
        None, description="With `subject`: RFC 3339 with an offset, or epoch milliseconds;"
                          " default: now. Tokens are compared by the second they were issued.")
    reason: str | None = Field(None, max_length=500, description="Kept for operators.")

    @field_validator("issued_before", mode="before")
    @classmethod
    def _time_form(cls, value: object) -> object:
        if isinstance(value, str):
            return due_from_text(value)
        return value

    @model_validator(mode="after")
    def _one_target(self) -> RevokeRequest:
        if (self.token_id is None) == (self.subject is None):
            raise ValueError("give exactly one of token_id and subject")
        if self.token_id is not None and self.issued_before is not None:
            raise ValueError("issued_before goes with subject only")
        return self


class RevocationView(_Response):
    """One revocation in force."""

    id: int
    token_id: str | None = Field(description="The token revoked (and those minted from it).")
    subject: str | None = Field(description="The subject whose earlier tokens are revoked.")
    issued_before: int | None = Field(
        description="Tokens of `subject` issued before this (epoch ms) are refused.")
    revoked_at: int
    revoked_by: str | None = Field(description="The subject of the operator who revoked.")
    reason: str | None
    kept_until: int = Field(
        description="When it is dropped (epoch ms): every token it refuses has expired by then.")


class RevocationList(_Response):
    """The space's revocations in force, oldest first."""

    revocations: list[RevocationView]


__all__ = [
    "ID_REGEX",
    "MAX_SAFE_INTEGER",
    "AbortRequest",
    "AbortView",
    "ApprovalRequest",
    "ApprovalView",
    "BindingWaitView",
    "EventsQuery",
    "FaultView",
    "FieldError",
    "GenerationView",
    "Health",
    "HeldThreadView",
    "HistoryPage",
    "HistoryQuery",
    "HistoryRecord",
    "HostLaneView",
    "JournalStepView",
    "JournalSummary",
    "LaneView",
    "MaintenanceView",
    "MessageView",
    "NativeRetryView",
    "OpenSubmission",
    "PassReportView",
    "Problem",
    "ResolveRequest",
    "RestartRequest",
    "RevocationList",
    "RevocationView",
    "RevokeRequest",
    "ScheduleErrorView",
    "ScheduleList",
    "ScheduleView",
    "ScheduledItem",
    "SkipRequest",
    "SkippedRecordView",
    "SubmissionDetail",
    "SubmissionView",
    "SubmitRequest",
    "SubscriberSkip",
    "SubscriberView",
    "ThreadItem",
    "ThreadPage",
    "ThreadSummary",
    "ThreadsQuery",
    "TokenId",
    "ViewStateName",
    "WaitView",
    "due_from_text",
    "rfc3339_ms",
]
