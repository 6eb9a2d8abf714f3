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
from typing import Any

from threadline.errors import ValidationFailed

#: Any value that round-trips through JSON.
JsonValue = Any

_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


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
        )


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to ``admit``: the submission and whether this call created it."""

    submission: Submission
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


def encode_json(value: JsonValue, *, field: str = "value") -> str:
    """Canonical JSON text of ``value``; a value JSON cannot carry raises ``ValidationFailed``.

    So does a string holding a lone surrogate (JSON text may spell one as ``"\\ud800"``): it
    has no UTF-8 form, so storage could not take the text.
    """
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"{field} is not JSON: {exc}", field=field) from exc
    return text


def decode_json(text: str | None) -> JsonValue:
    """The value of stored JSON text (None stays None)."""
    return None if text is None else json.loads(text)


def digest(*parts: str) -> str:
    """A stable SHA-256 hex digest of the parts, length-prefixed so no two splits collide."""
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        hasher.update(f"{len(data)}:".encode())
        hasher.update(data)
    return hasher.hexdigest()


def check_id(value: str, *, field: str) -> str:
    """Refuse an identifier outside ``[A-Za-z0-9._:-]{1,128}``."""
    if not isinstance(value, str) or _ID.fullmatch(value) is None:
        raise ValidationFailed(f"{field} must match [A-Za-z0-9._:-]{{1,128}}", field=field)
    return value


def error_envelope(exc: BaseException, *, attempt: int) -> dict[str, JsonValue]:
    """The JSON an Attempt's failure is stored as.

    The message is made storable: a lone surrogate in it is kept as its escape (``\\udc80``),
    so recording a failure never fails itself.
    """
    message = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
    return {"type": type(exc).__name__, "message": message, "attempt": attempt}


__all__ = [
    "CLAIMABLE",
    "AbortState",
    "Admission",
    "ApprovalDecision",
    "JsonValue",
    "Outcome",
    "Resolution",
    "Settlement",
    "StepEffect",
    "StepState",
    "Submission",
    "SubmissionState",
    "WaitKind",
    "WaitState",
    "WorkItem",
    "check_id",
    "decode_json",
    "digest",
    "encode_json",
    "error_envelope",
]
