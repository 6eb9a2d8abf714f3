"""Runtime configuration, validated once when it is built."""

from __future__ import annotations

import re
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: A space id as every route and message names one (see ``threadline.threads.model``).
_SPACE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

#: Cloudflare stops an alarm handler after 15 minutes of wall time.
PLATFORM_ALARM_WALL_LIMIT_MS = 900_000
#: Cloudflare's SQLite-backed objects refuse a string, blob or row over 2 MB (``SQLITE_TOOBIG``).
PLATFORM_ROW_LIMIT_BYTES = 2_000_000
#: The shortest retention (one day): a message's sender retries well within it, so the key
#: that makes its delivery idempotent outlives every retry.
MIN_RETENTION_MS = 86_400_000
#: The longest retention (ten years of 365 days).
MAX_RETENTION_MS = 315_360_000_000
#: The Attempt wall bound used unless the event deadline is shorter (then half of it).
DEFAULT_ATTEMPT_TIMEOUT_MS = 300_000


class RuntimeConfig(BaseModel):
    """Tunables of one threadline deployment.

    Frozen and validated at construction: a bad value raises pydantic's ``ValidationError``
    naming the field, before anything is written.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    alarm_backoff_base_ms: int = Field(
        1_000, ge=1, le=3_600_000, description="Backoff for a failed pass or lane: base delay."
    )
    alarm_backoff_cap_ms: int = Field(
        300_000, ge=1, le=3_600_000, description="Backoff ceiling for a failed pass or lane."
    )
    park_after_stalls: int = Field(
        12, ge=1, le=30, description="Claims without progress before a lane is parked."
    )
    lease_ms: int = Field(60_000, ge=1_000, le=3_600_000, description="Attempt lease length.")
    native_concurrency: int = Field(
        64, ge=1, le=256,
        description="Threads whose head Attempts run at once in one pass: sized for turns that"
        " wait on I/O (a model call), which cost the object almost nothing while they wait.",
    )
    after_native_concurrency: int = Field(
        2, ge=1, le=16, description="After-native lanes run at once after native work joined."
    )
    yield_after_ms: int = Field(
        600_000, ge=1, description="No new Attempt is admitted after this much of a pass."
    )
    event_deadline_ms: int = Field(
        840_000,
        ge=1,
        lt=PLATFORM_ALARM_WALL_LIMIT_MS,
        description="Cooperative deadline of one alarm event.",
    )
    projection_dispatch_timeout_ms: int = Field(
        30_000, ge=1, le=300_000, description="Bound of one projection backfill wave."
    )
    max_attempts: int = Field(
        5,
        ge=1,
        le=100,
        description=(
            "Failed Attempts before a submission settles failed. An Attempt lost without"
            " failing (the object was reset under it) is not counted here."
        ),
    )
    max_consecutive_losses: int = Field(
        20,
        ge=1,
        le=1_000,
        description=(
            "Attempts lost in a row (the object was reset under each, with no step finishing"
            " and no Attempt ending otherwise between them: no suspension, yield, failure or"
            " Unknown Outcome) before the submission settles failed as a crash loop. Losses"
            " never spend max_attempts; this bound ends a step that brings the object down"
            " every time."
        ),
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1_024, le=33_554_432, description="Largest accepted request body."
    )
    max_value_bytes: int = Field(
        262_144,
        ge=1_024,
        le=33_554_432,
        description=(
            "Largest UTF-8 JSON an agent or operator may store as one value: a step value,"
            " result, record, approval payload or decision, sent message, or accepted Unknown"
            " Outcome result. The default stays well below the platform's 2 MB row limit, so a"
            " value and the envelope stored around it fit."
        ),
    )
    max_json_depth: int = Field(
        64,
        ge=1,
        le=256,
        description="Deepest nesting of arrays and objects in any JSON value stored or read.",
    )
    max_message_hops: int = Field(
        16,
        ge=1,
        le=1_000,
        description=(
            "Longest chain of messages (turn.send from a submission that came from a message,"
            " and so on) before a message fails with message.failed (MessageLoop): 1 allows"
            " only messages sent by input from outside any message."
        ),
    )
    message_senders: tuple[str, ...] | None = Field(
        None,
        max_length=1_000,
        description=(
            "The spaces whose messages (turn.send) this deployment's spaces admit; a message"
            " from any other is refused for good (message.failed at its sender). None: any"
            " space that reaches the object through the namespace binding. A space's own"
            " messages are always admitted."
        ),
    )
    attempt_timeout_ms: int = Field(
        DEFAULT_ATTEMPT_TIMEOUT_MS,
        ge=1,
        description=(
            "Wall bound of one Attempt, enforced by cancelling the agent; must stay below"
            " event_deadline_ms. Defaults to 300 s, or half the event deadline when that is"
            " shorter than 300 s and no bound is given."
        ),
    )

    cancel_grace_ms: int = Field(
        5_000,
        ge=0,
        le=60_000,
        description=(
            "How long a cancelled Attempt, lane handler or recovery-event hook may take to"
            " unwind before it is abandoned; one that swallows the cancellation cannot hold"
            " the pass longer than this."
            " event_deadline_ms + cancel_grace_ms must stay below the platform's limit."
        ),
    )
    sse_heartbeat_ms: int = Field(
        15_000,
        ge=1_000,
        le=300_000,
        description="An idle event stream sends a keep-alive comment this often.",
    )
    max_event_streams: int = Field(
        100,
        ge=1,
        le=10_000,
        description=(
            "Event streams one object serves at once; beyond it a new stream is refused with"
            " 503 and Retry-After. Each open stream holds memory in the object, which the"
            " platform caps at 128 MB. Measured in local workerd (scripts/bench-streams): an"
            " idle stream holds 50 to 95 KB in the object, next to a baseline Python heap of"
            " 43 MB; while records fan out to every stream, memory rises by 0.3 to 0.45 MB per"
            " stream over five submissions (outside the Python heap) and admissions slow"
            " (0.3 to 1.4 s with 100 open, 2 to 4 s with 400). 100 keeps the streams' share"
            " at 30 to 45 MB, so object and streams stay well within the 128 MB."
        ),
    )
    max_event_streams_per_subject: int = Field(
        20,
        ge=1,
        le=10_000,
        description=(
            "Event streams one principal (one subject, or one token without a subject) may"
            " hold open on one object; beyond it 429 with Retry-After."
        ),
    )

    retention_ms: int | None = Field(
        None,
        ge=MIN_RETENTION_MS,
        le=MAX_RETENTION_MS,
        description=(
            "How long settled work is kept: a Thread's log records, and its settled"
            " submissions with their journal, waits and sent messages, older than this are"
            " deleted by the threadline:retention lane once every subscriber has consumed"
            " them and nothing open refers to them. None (the default) keeps everything."
            " An idempotency key is remembered as long as its submission is kept. At least"
            " one day, at most ten years."
        ),
    )

    @field_validator("message_senders")
    @classmethod
    def _space_ids(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for space in value or ():
            if (_SPACE_ID.fullmatch(space) is None or space in (".", "..")
                    or space.startswith("threadline:")):
                raise ValueError(f"{space!r} is not a space id ([A-Za-z0-9._:-]{{1,128}}, not"
                                 " '.', '..' or under the reserved threadline: prefix)")
        return value

    @model_validator(mode="after")
    def _check_relations(self) -> Self:
        if self.alarm_backoff_cap_ms < self.alarm_backoff_base_ms:
            raise ValueError("alarm_backoff_cap_ms must be >= alarm_backoff_base_ms")
        if self.yield_after_ms > self.event_deadline_ms:
            raise ValueError("yield_after_ms must be <= event_deadline_ms")
        if self.event_deadline_ms + self.cancel_grace_ms >= PLATFORM_ALARM_WALL_LIMIT_MS:
            # At the event deadline the running agents get the grace to unwind: both must end
            # before the platform stops the handler.
            raise ValueError(
                "event_deadline_ms + cancel_grace_ms must be <"
                f" {PLATFORM_ALARM_WALL_LIMIT_MS} (the platform's alarm wall limit)"
            )
        if self.attempt_timeout_ms >= self.event_deadline_ms:
            if "attempt_timeout_ms" in self.model_fields_set:
                raise ValueError("attempt_timeout_ms must be < event_deadline_ms")
            # A short event deadline with no explicit bound: derive one that fits inside it.
            object.__setattr__(self, "attempt_timeout_ms", max(1, self.event_deadline_ms // 2))
        return self

    @property
    def min_alarm_delay_ms(self) -> int:
        """The earliest an alarm may be armed ahead of now: half the backoff base, at least 1."""
        return max(1, -(-self.alarm_backoff_base_ms // 2))


__all__ = [
    "DEFAULT_ATTEMPT_TIMEOUT_MS",
    "MAX_RETENTION_MS",
    "MIN_RETENTION_MS",
    "PLATFORM_ALARM_WALL_LIMIT_MS",
    "PLATFORM_ROW_LIMIT_BYTES",
    "RuntimeConfig",
]
