"""States, value types and the JSON codec shared by the thread runtime.

Every ``StrEnum`` here is mirrored by a ``CHECK`` constraint in ``storage/schema.py``; a test
keeps the two in step. Stored JSON is canonical (sorted keys, no spaces, no NaN) so that the
same input always has the same digest.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

from threadline.errors import ValidationFailed, ValueTooLarge

#: Any value that round-trips through JSON.
JsonValue = Any

#: What an identifier (a thread, agent, step, key or space name) matches; ``.`` and ``..`` do
#: too, and are refused apart.
ID_PATTERN = r"[A-Za-z0-9._:-]{1,128}"
_ID = re.compile(ID_PATTERN)
#: Ids a URL path cannot carry: normalisation rewrites them to the parent or the same segment.
_PATH_DOTS = frozenset({".", ".."})

#: The longest durable delay: a year and a day (366 days), in seconds. It bounds a
#: ``turn.sleep`` and how far ahead a delayed submission may fall due.
MAX_SLEEP_SECONDS = 366 * 86_400

#: ``RuntimeConfig.max_json_depth``'s default: nesting of arrays and objects a value may have.
DEFAULT_MAX_JSON_DEPTH = 64
#: The deepest stored JSON ever decoded: the largest configurable depth plus room for the
#: envelopes the runtime wraps around an agent's value (a settled record around a result).
#: Decoding refuses anything deeper before the recursive parser could exhaust the stack.
DECODE_DEPTH_CEILING = 256 + 8
#: Longest failure message kept in an error envelope; the rest is cut, so that recording a
#: failure never needs more room than the row has.
MAX_ERROR_MESSAGE_CHARS = 2_000
#: Longest exception type name kept in an error envelope (``type()`` takes any name).
MAX_ERROR_TYPE_CHARS = 200

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class SubmissionState(StrEnum):
    """Where a submission is in its life (DESIGN §5)."""

    QUEUED = "queued"
    READY = "ready"
    RUNNING = "running"
    SUSPENDED = "suspended"
    UNKNOWN = "unknown"
    JOINED = "joined"
    TERMINALIZING = "terminalizing"
    SETTLED = "settled"


class Outcome(StrEnum):
    """How a settled submission ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"


class StepEffect(StrEnum):
    """What a crash in the middle of a step means for its external effect."""

    #: Running it again is harmless: a crash re-runs it.
    IDEMPOTENT = "idempotent"
    #: It may have acted once already: a crash turns it into an Unknown Outcome.
    UNCERTAIN = "uncertain"


class StepState(StrEnum):
    """A journal entry's state."""

    STARTED = "started"
    FINISHED = "finished"
    FAILED = "failed"


class WaitKind(StrEnum):
    """What a suspended or unknown submission waits for."""

    APPROVAL = "approval"
    TIMER = "timer"
    UNKNOWN = "unknown"
    EVENT = "event"


class WaitState(StrEnum):
    """A wait's state."""

    OPEN = "open"
    RESOLVED = "resolved"
    CANCELLED = "cancelled"


class AbortState(StrEnum):
    """An abort intent's state: accepted when written, applied once the submission settled."""

    REQUESTED = "requested"
    ACCEPTED = "accepted"
    APPLIED = "applied"


class Resolution(StrEnum):
    """How an operator resolves an Unknown Outcome."""

    RETRY = "retry"
    ACCEPT = "accept"
    ABORT = "abort"


class LossCause(StrEnum):
    """Why an Attempt was lost: it ended without its end being recorded, and not by failing."""

    #: The object was reset (a deploy, an eviction, a crash): another incarnation made the claim.
    RESET = "reset"
    #: This incarnation stopped it unrecorded: cancelled at the alarm event's deadline, or
    #: with a pass that failed around it.
    INTERRUPTED = "interrupted"
    #: A claim that names no incarnation, found after its lease expired.
    LEASE_EXPIRED = "lease-expired"


#: States that a claim may start an Attempt from.
CLAIMABLE = (SubmissionState.QUEUED, SubmissionState.READY)


@dataclass(frozen=True, slots=True)
class WorkItem:
    """A control-only snapshot of one open submission: no input, journal or result decoded."""

    submission_id: str
    thread_id: str
    seq: int
    agent: str
    state: SubmissionState
    revision: int
    attempts: int
    not_before: int | None
    lease_expires_at: int | None
    #: Who holds the claim of a running submission (see ``runtime.lease_owner``).
    lease_owner: str | None = None
    #: Out of the live range of the open-work index: a waiting state, or input held behind a
    #: suspended head (see ``transitions.hold_followers``).
    dormant: bool = False


@dataclass(frozen=True, slots=True)
class Submission:
    """A full view of one submission, inputs and outcome decoded."""

    id: str
    thread_id: str
    seq: int
    agent: str
    idempotency_key: str | None
    input: JsonValue
    state: SubmissionState
    outcome: Outcome | None
    result: JsonValue
    error: JsonValue
    attempts: int
    revision: int
    lease_expires_at: int | None
    not_before: int | None
    created_at: int
    updated_at: int
    settled_at: int | None
    #: Attempts lost without failing (see :class:`LossCause`); they spend no ``max_attempts``.
    losses: int = 0
    #: Losses in a row at journal position ``loss_position``: no step finished and no Attempt
    #: ended otherwise between them (0 once one did; :mod:`threadline.threads.losses`).
    loss_streak: int = 0
    #: The journal position of the latest loss (its latest finished step's then, 0 if none).
    loss_position: int | None = None
    #: The cause of the latest loss.
    loss_cause: LossCause | None = None
    #: The head this submission was joined into as follow-up input (``turn.followups()``),
    #: kept after it settles; None for input that ran on its own.
    joined_to: str | None = None
    #: The subject of the principal that submitted it (None: unknown, or no principal: a
    #: message from another Thread, a schedule's run, an agent's own admission).
    submitted_by: str | None = None
    #: The hop count of the message it was admitted from (0: it came from no message); a
    #: message its agent sends goes one hop further.
    message_hops: int = 0
    #: Where the message it was admitted from was sent: ``<space>/<thread>``, as the sending
    #: object named them (None: it came from no message).
    message_from: str | None = None
    #: Attempts that failed so far (lost ones are counted in ``losses``, not here).
    failures: int = 0
    #: The errors of the first failed Attempt and of the latest ones, oldest first (see
    #: :mod:`threadline.threads.failed_attempts`); ``failures - len(...)`` were dropped.
    failed_attempts: tuple[FailedAttempt, ...] = ()

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Submission:
        """Decode a ``tl_submissions`` row."""
        return cls(
            id=row["id"],
            thread_id=row["thread_id"],
            seq=int(row["seq"]),
            agent=row["agent"],
            idempotency_key=row["idempotency_key"],
            input=decode_json(row["input_json"]),
            state=SubmissionState(row["state"]),
            outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
            result=decode_json(row["result_json"]),
            error=decode_json(row["error_json"]),
            attempts=int(row["attempts"]),
            revision=int(row["revision"]),
            lease_expires_at=row["lease_expires_at"],
            not_before=row["not_before"],
            created_at=int(row["created_at"]),
            updated_at=int(row["updated_at"]),
            settled_at=row["settled_at"],
            losses=int(row["losses"]),
            loss_streak=int(row["loss_streak"]),
            loss_position=row["loss_position"],
            loss_cause=None if row["loss_cause"] is None else LossCause(row["loss_cause"]),
            joined_to=row["joined_to"],
            submitted_by=row["submitted_by"],
            message_hops=int(row["message_hops"]),
            message_from=row["message_from"],
            failures=int(row["failures"]),
            failed_attempts=tuple(
                FailedAttempt.from_json(entry) for entry in decode_json(row["failures_json"]) or ()
            ),
        )


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """The error one failed Attempt of a submission ended with, as the submission keeps it."""

    #: The Attempt's number (``turn.attempt``); None if its error did not name it.
    attempt: int | None
    #: The exception's type name.
    type: str
    #: Its message, cut as the error envelope cuts it (``MAX_ERROR_MESSAGE_CHARS``).
    message: str
    #: When the Attempt's end was recorded (epoch ms).
    at: int
    #: The submission failed with it; otherwise it ran again (or waits on an Unknown Outcome).
    final: bool
    #: When the retry was due (epoch ms); None when final, due at once, or Unknown.
    retry_at: int | None

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> FailedAttempt:
        """Decode one entry of ``tl_submissions.failures_json``."""
        return cls(attempt=entry["attempt"], type=entry["type"], message=entry["message"],
                   at=int(entry["at"]), final=bool(entry["final"]), retry_at=entry["retry_at"])


#: The state a delayed submission shows until it falls due. Not a ledger state: such a
#: submission has no row in ``tl_submissions`` (nor a FIFO seq) until then.
SCHEDULED = "scheduled"


@dataclass(frozen=True, slots=True)
class ScheduledSubmission:
    """A delayed submission that has not fallen due: it holds no place in its Thread's FIFO.

    When ``not_before`` comes it is admitted under the same id, behind whatever its Thread
    received meanwhile, and from then on it is a :class:`Submission` like any other.
    """

    id: str
    thread_id: str
    agent: str
    idempotency_key: str | None
    input: JsonValue
    #: When it falls due (epoch ms).
    not_before: int
    created_at: int
    #: The subject of the principal that submitted it (None: unknown, or no principal).
    submitted_by: str | None = None

    @property
    def state(self) -> str:
        """Always ``"scheduled"``."""
        return SCHEDULED

    @property
    def seq(self) -> None:
        """None: it takes its FIFO seq when it falls due."""
        return None


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to ``admit``: the submission and whether this call created it.

    The submission is a :class:`ScheduledSubmission` while it waits for its due time (an
    admission with a ``not_before`` ahead, or a replay of one).
    """

    submission: Submission | ScheduledSubmission
    created: bool


@dataclass(frozen=True, slots=True)
class Settlement:
    """The one settlement of a submission, as committed."""

    submission_id: str
    thread_id: str
    outcome: Outcome
    result: JsonValue = None
    error: JsonValue = None


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A decided approval. Truthy when approved, so ``if await turn.approval(...)`` reads well."""

    approved: bool
    payload: JsonValue = None

    def __bool__(self) -> bool:
        return self.approved


def encode_json(
    value: JsonValue,
    *,
    field: str = "value",
    max_depth: int | None = DEFAULT_MAX_JSON_DEPTH,
    max_bytes: int | None = None,
) -> str:
    """Canonical JSON text of ``value``; a value JSON cannot carry raises ``ValidationFailed``.

    Refused, each naming ``field``: a value JSON cannot carry; an object key that is not a
    string (JSON would turn ``1`` into ``"1"``, so the value read back would differ from the
    one stored, and ``sort_keys`` would order numbers as numbers); nesting deeper than
    ``max_depth`` (``max_json_depth``), checked without recursion before the encoder recurses;
    a string holding a lone surrogate (it has no UTF-8 form, so storage could not take the
    text); and, with ``max_bytes``, UTF-8 text longer than that (:class:`ValueTooLarge`,
    naming ``max_value_bytes``). ``max_depth=None`` is for envelopes around values already
    checked.
    """
    if max_depth is not None:
        _check_shape(value, field=field, max_depth=max_depth)
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationFailed(f"{field} is not JSON: {exc}", field=field) from exc
    if max_bytes is not None and size > max_bytes:
        raise ValueTooLarge(
            f"{field} is {size} bytes of JSON, over max_value_bytes ({max_bytes})",
            field=field,
            limit="max_value_bytes",
        )
    return text


def _check_shape(value: JsonValue, *, field: str, max_depth: int) -> None:
    """Refuse non-string object keys and nesting deeper than ``max_depth``, iteratively."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
            for key in item:
                if not isinstance(key, str):
                    raise ValidationFailed(
                        f"{field} has an object key that is not a string: {key!r}", field=field
                    )
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        depth += 1
        if depth > max_depth:
            raise ValidationFailed(
                f"{field} is nested deeper than max_json_depth ({max_depth})",
                field=field,
                limit="max_json_depth",
            )
        stack.extend((child, depth) for child in children if isinstance(child, (dict, list, tuple)))


def decode_json(text: str | None, *, max_depth: int = DECODE_DEPTH_CEILING) -> JsonValue:
    """The value of stored JSON text (None stays None).

    Text nested deeper than ``max_depth`` raises ``ValidationFailed`` naming
    ``max_json_depth`` instead of letting the recursive parser raise ``RecursionError``.
    """
    if text is None:
        return None
    if _nesting_exceeds(text, max_depth):
        raise _too_deep(max_depth)
    try:
        return json.loads(text)
    except RecursionError as exc:  # the stack was already deep: refused the same way
        raise _too_deep(max_depth) from exc


def _too_deep(max_depth: int) -> ValidationFailed:
    return ValidationFailed(
        f"stored JSON is nested deeper than max_json_depth ({max_depth})", limit="max_json_depth"
    )


def _nesting_exceeds(text: str, limit: int) -> bool:
    # Cheap first: text with few brackets cannot be deep, whatever its strings hold.
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def digest(*parts: str) -> str:
    """A stable SHA-256 hex digest of the parts, length-prefixed so no two splits collide."""
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        hasher.update(f"{len(data)}:".encode())
        hasher.update(data)
    return hasher.hexdigest()


def check_id(value: str, *, field: str) -> str:
    """Refuse an identifier outside ``[A-Za-z0-9._:-]{1,128}``, and ``.`` and ``..``.

    The two dot ids match the pattern but no URL can address them: path normalisation turns
    ``/threads/..`` into ``/``.
    """
    if not isinstance(value, str) or _ID.fullmatch(value) is None:
        raise ValidationFailed(f"{field} must match [A-Za-z0-9._:-]{{1,128}}", field=field)
    if value in _PATH_DOTS:
        raise ValidationFailed(f"{field} may not be {value!r}", field=field)
    return value


#: Prefixes of the idempotency keys the runtime derives itself: a schedule fire's
#: (``schedule:``), a message's admission (``msg:``), an agent's follow-up (``<submission
#: id>:submit``, ``sub_``), and any of threadline's own to come. A client's key never starts
#: with one, so no client can take such a key before the runtime uses it.
RUNTIME_KEY_PREFIXES = ("schedule:", "msg:", "sub_", "threadline:")


def is_runtime_key(key: str) -> bool:
    """True if ``key`` is of the shape only the runtime derives (see
    :data:`RUNTIME_KEY_PREFIXES`)."""
    return key.startswith(RUNTIME_KEY_PREFIXES)


#: Prefix of the space ids threadline keeps for its own objects (``threadline:health`` answers
#: every open request): no client, token or message names one.
RESERVED_SPACE_PREFIX = "threadline:"


def check_space_id(value: str, *, field: str = "space") -> str:
    """:func:`check_id`, and refuse the :data:`RESERVED_SPACE_PREFIX`."""
    check_id(value, field=field)
    if value.startswith(RESERVED_SPACE_PREFIX):
        raise ValidationFailed(
            f"{field} may not start with {RESERVED_SPACE_PREFIX!r}: those spaces are"
            " threadline's own", field=field)
    return value


#: Longest subject recorded: the bound ``threadline.access`` puts on a principal's subject.
MAX_SUBJECT_CHARS = 256


def valid_subject(value: object) -> TypeGuard[str]:
    """True for printable text of 1 to ``MAX_SUBJECT_CHARS`` characters without surrounding
    whitespace (an HTTP header, which carries it to the object, would lose that)."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_SUBJECT_CHARS
            and value.isprintable() and value == value.strip())


def check_subject(value: object, *, field: str = "subject") -> str | None:
    """A principal's subject as recorded on what it causes: None (unknown), or printable text
    of 1 to ``MAX_SUBJECT_CHARS`` characters, the rule ``threadline.access.Principal`` applies.

    Anything else raises :class:`ValidationFailed` naming ``field``, before anything is written.
    """
    if value is None:
        return None
    if not valid_subject(value):
        raise ValidationFailed(
            f"{field} must be printable text of 1 to {MAX_SUBJECT_CHARS} characters, without"
            " surrounding whitespace",
            field=field,
        )
    return value


def error_envelope(exc: BaseException, *, attempt: int) -> dict[str, JsonValue]:
    """The JSON an Attempt's failure is stored as.

    The message is made storable: a lone surrogate in it is kept as its escape (``\\udc80``)
    and it is cut to ``MAX_ERROR_MESSAGE_CHARS``, so recording a failure never fails itself;
    the type's name likewise, cut to ``MAX_ERROR_TYPE_CHARS``.
    """
    try:
        text = str(exc)
    except Exception:  # a foreign exception whose __str__ raises still gets recorded
        text = "<unprintable message>"
    if len(text) > MAX_ERROR_MESSAGE_CHARS:
        text = text[:MAX_ERROR_MESSAGE_CHARS] + f"... ({len(text)} characters)"
    message = _storable(text)
    return {"type": _storable(type(exc).__name__[:MAX_ERROR_TYPE_CHARS]), "message": message,
            "attempt": attempt}


def _storable(text: str) -> str:
    """``text`` with each lone surrogate kept as its escape: UTF-8 has no form for one."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


__all__ = [
    "CLAIMABLE",
    "DECODE_DEPTH_CEILING",
    "DEFAULT_MAX_JSON_DEPTH",
    "ID_PATTERN",
    "MAX_ERROR_MESSAGE_CHARS",
    "MAX_ERROR_TYPE_CHARS",
    "MAX_SLEEP_SECONDS",
    "MAX_SUBJECT_CHARS",
    "RESERVED_SPACE_PREFIX",
    "RUNTIME_KEY_PREFIXES",
    "SCHEDULED",
    "AbortState",
    "Admission",
    "ApprovalDecision",
    "FailedAttempt",
    "JsonValue",
    "LossCause",
    "Outcome",
    "Resolution",
    "ScheduledSubmission",
    "Settlement",
    "StepEffect",
    "StepState",
    "Submission",
    "SubmissionState",
    "WaitKind",
    "WaitState",
    "WorkItem",
    "check_id",
    "check_space_id",
    "check_subject",
    "decode_json",
    "digest",
    "encode_json",
    "error_envelope",
    "is_runtime_key",
]
