"""What a Thread's log holds, as consumers see it: :class:`Record` and the runtime's own kinds.

A Thread's log (``tl_history``) is the one ordered account of what happened in it. Agents append
records with :meth:`Turn.emit`; the runtime appends its own facts under reserved kinds, each once,
in the transaction of the fact it reports. The SSE stream, subscribers and backfills all read this
one log, so a consumer that has read a Thread up to some seq has missed nothing before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadline.threads.model import JsonValue

#: A submission settled: ``{"submission_id", "outcome", "result"?, "error"?, "joined_to"?,
#: "submitted_by"?, "aborted_by"?, "resolved_by"?}``. The last three name the subjects of the
#: principals who submitted it, requested the abort it settled by, and resolved its Unknown
#: Outcome by aborting it; each is present only when known.
SUBMISSION_SETTLED = "submission.settled"
#: An agent asked for an approval: ``{"submission_id", "key", "payload"}``.
APPROVAL_REQUESTED = "approval.requested"
#: An approval was decided: ``{"submission_id", "key", "approved", "decided_by"?}``
#: (``decided_by``, the subject of the principal who decided, only when known).
APPROVAL_DECIDED = "approval.decided"
#: A message this Thread sent was refused for good: ``{"message_id", "to_space", "to_thread",
#: "reason"}``.
MESSAGE_FAILED = "message.failed"
#: An operator moved a subscriber past a record it could not deliver: ``{"subscriber",
#: "record_id", "seq", "kind", "position", "submission_id"?, "skipped_by"?}`` (the skipped
#: record's id, seq and kind, its position in the space's log, and the subject of the principal
#: who skipped it, only when known), appended to the skipped record's Thread.
SUBSCRIBER_SKIPPED = "subscriber.skipped"


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a Thread's log, as delivered to a subscriber.

    ``record_id`` is stable across retries and redeliveries: a consumer deduplicates by it.
    ``seq`` orders the records of one Thread; records of different Threads are not ordered
    against each other.
    """

    thread_id: str
    seq: int
    record_id: str
    submission_id: str | None
    kind: str
    body: JsonValue
    created_at: int

    def to_json(self) -> dict[str, JsonValue]:
        """The record as the JSON object webhooks and queues carry."""
        return {
            "thread_id": self.thread_id, "seq": self.seq, "record_id": self.record_id,
            "submission_id": self.submission_id, "kind": self.kind, "body": self.body,
            "created_at": self.created_at,
        }


__all__ = [
    "APPROVAL_DECIDED", "APPROVAL_REQUESTED", "MESSAGE_FAILED", "SUBMISSION_SETTLED",
    "SUBSCRIBER_SKIPPED", "Record",
]
