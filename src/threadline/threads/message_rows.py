"""Messages between Threads (``tl_messages``), as sent and as received.

Sending: an Attempt only writes the row, in its own transaction, with an id derived from the
submission and the send's place in it (``<submission id>:send``, ``...:send#2``), so a replay
finds the row instead of sending twice. The ``threadline:messages`` lane delivers pending rows
(:mod:`threadline.maintenance.message_lane`); a row ends ``delivered`` (with the submission it
became) or ``failed`` (with the reason).

Receiving (:func:`admit_inbound`): a message becomes a submission of the target Thread whose
idempotency key and id are derived from the message id, so delivering it again, from the same
space or another, finds that submission instead of adding one.

Every read goes through a key or an index: the lane's (the due rows, the next due time) seek
in the partial index of pending rows, a submission's messages are a range of the primary key
(their ids start with the submission's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from threadline.config import RuntimeConfig
from threadline.errors import BindingUnavailable, Conflict, ThreadlineError, ValidationFailed
from threadline.storage.port import Row, Storage
from threadline.threads import agent_choice, ledger
from threadline.threads.agents import AgentRegistry
from threadline.threads.model import check_id, decode_json, digest, encode_json
from threadline.threads.ports import MutationGate
from threadline.threads.routing import Accepted, Refused, Verdict

_SELECT = (
    "SELECT id, from_thread, from_submission, to_space, to_thread, agent, input_json, state,"
    " attempts, next_attempt_at, last_error, admitted_as, created_at, delivered_at, failed_at"
    " FROM tl_messages"
)
_EXISTS = "SELECT 1 AS present FROM tl_messages WHERE id = ?"
_INSERT = (
    "INSERT INTO tl_messages (id, from_thread, from_submission, to_space, to_thread, agent,"
    " input_json, next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO NOTHING"
)
# The partial index holds pending rows only, in due order: each read is what it returns,
# however many messages were delivered before. Most waves find one row due, answered by the
# first two rows of the index; otherwise a second read takes a batch due and the next one.
_PENDING = _SELECT + " INDEXED BY tl_messages_pending WHERE state = 'pending'"
_FIRST_TWO = _PENDING + " ORDER BY next_attempt_at LIMIT 2"
_DUE_THEN_NEXT = (
    "SELECT * FROM (SELECT id, from_thread, from_submission, to_space, to_thread, agent,"
    " input_json, state, attempts, next_attempt_at, last_error, admitted_as, created_at,"
    " delivered_at, failed_at FROM tl_messages INDEXED BY tl_messages_pending"
    " WHERE state = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?)"
    " UNION ALL SELECT * FROM (SELECT id, from_thread, from_submission, to_space, to_thread,"
    " agent, input_json, state, attempts, next_attempt_at, last_error, admitted_as, created_at,"
    " delivered_at, failed_at FROM tl_messages INDEXED BY tl_messages_pending"
    " WHERE state = 'pending' AND next_attempt_at > ? ORDER BY next_attempt_at LIMIT 1)"
)
_NEXT_DUE = (
    "SELECT next_attempt_at FROM tl_messages INDEXED BY tl_messages_pending"
    " WHERE state = 'pending' ORDER BY next_attempt_at LIMIT 1"
)
# A submission's message ids all start with "<submission id>:" (":" sorts just below ";").
_OF_SUBMISSION = _SELECT + " WHERE id > ? AND id < ? LIMIT ?"
# Each state change is a compare-and-set on the row as it was read.
_CLAIM = (
    "UPDATE tl_messages SET attempts = attempts + 1, next_attempt_at = ?"
    " WHERE id = ? AND state = 'pending' AND attempts = ?"
)
_NOTE_FAILURE = (
    "UPDATE tl_messages SET last_error = ?, next_attempt_at = ? WHERE id = ? AND state = 'pending'"
)
_DELIVERED = (
    "UPDATE tl_messages SET state = 'delivered', next_attempt_at = NULL, admitted_as = ?,"
    " delivered_at = ? WHERE id = ? AND state = 'pending'"
)
_FAILED = (
    "UPDATE tl_messages SET state = 'failed', next_attempt_at = NULL, last_error = ?,"
    " failed_at = ? WHERE id = ? AND state = 'pending'"
)

#: Longest reason kept with a failed message (and in its ``message.failed`` record).
MAX_REASON_CHARS = 1_000
#: Longest message id a target accepts (a submission id, ``:send`` and its occurrence).
MAX_MESSAGE_ID_CHARS = 256
#: Most messages a submission's detail lists.
MESSAGES_LISTED = 100


@dataclass(frozen=True, slots=True)
class Message:
    """One ``tl_messages`` row (its input still JSON text)."""

    id: str
    from_thread: str
    from_submission: str
    to_space: str
    to_thread: str
    agent: str | None
    input_json: str
    #: ``pending``, ``delivered`` or ``failed``.
    state: str
    #: Deliveries tried through a router (a local admission is never tried twice).
    attempts: int
    next_attempt_at: int | None
    #: Why it failed for good, or the latest transient failure while pending.
    last_error: str | None
    #: The submission it became at its target, once delivered.
    admitted_as: str | None
    created_at: int
    delivered_at: int | None
    failed_at: int | None


def _message(row: Row) -> Message:
    return Message(
        id=str(row["id"]), from_thread=str(row["from_thread"]),
        from_submission=str(row["from_submission"]), to_space=str(row["to_space"]),
        to_thread=str(row["to_thread"]), agent=row["agent"], input_json=str(row["input_json"]),
        state=str(row["state"]), attempts=int(row["attempts"]),
        next_attempt_at=row["next_attempt_at"], last_error=row["last_error"],
        admitted_as=row["admitted_as"], created_at=int(row["created_at"]),
        delivered_at=row["delivered_at"], failed_at=row["failed_at"],
    )


def message_exists(storage: Storage, message_id: str) -> bool:
    """True when ``message_id`` was already written."""
    return storage.exec(_EXISTS, message_id).first() is not None


def enqueue_message(
    storage: Storage,
    *,
    message_id: str,
    from_thread: str,
    from_submission: str,
    to_space: str,
    to_thread: str,
    input_json: str,
    now: int,
    agent: str | None = None,
) -> bool:
    """Write a pending message due for delivery now; True when this call added it."""
    written = storage.exec(
        _INSERT, message_id, from_thread, from_submission, to_space, to_thread, agent,
        input_json, now, now,
    ).changed
    return written == 1


def due_then_next(storage: Storage, now: int, limit: int) -> tuple[list[Message], int | None]:
    """At most ``limit`` pending messages due at ``now``, earliest first, and when the first
    one not due yet is (None: none waits)."""
    rows = [_message(row) for row in storage.exec(_FIRST_TWO)]
    if limit > 1 and len(rows) == 2 and (rows[1].next_attempt_at or 0) <= now:
        rows = [_message(row) for row in storage.exec(_DUE_THEN_NEXT, now, limit, now)]
    due = [row for row in rows if (row.next_attempt_at or 0) <= now][:limit]
    later = (row.next_attempt_at for row in rows if (row.next_attempt_at or 0) > now)
    return due, next(later, None)


def next_due(storage: Storage) -> int | None:
    """When the earliest pending message is due (one indexed row), or None."""
    value = storage.exec(_NEXT_DUE).scalar()
    return None if value is None else int(value)


def of_submission(
    storage: Storage, submission_id: str, *, limit: int = MESSAGES_LISTED
) -> list[Message]:
    """The messages ``submission_id`` sent, in the order it sent them."""
    rows = storage.exec(_OF_SUBMISSION, f"{submission_id}:", f"{submission_id};", limit)
    return sorted((_message(row) for row in rows), key=lambda m: (m.created_at, len(m.id), m.id))


def claim(storage: Storage, message: Message, retry_at: int) -> bool:
    """Charge one delivery attempt before calling out: should the call hang or the object be
    lost, the message is due again at ``retry_at``, not at once. False when it changed since
    it was read."""
    return storage.exec(_CLAIM, retry_at, message.id, message.attempts).changed == 1


def note_failure(storage: Storage, message_id: str, error: str, retry_at: int) -> None:
    """Keep the latest transient failure of a pending message, and when it goes again."""
    storage.exec(_NOTE_FAILURE, _cut(error), retry_at, message_id)


def mark_delivered(storage: Storage, message_id: str, submission_id: str, now: int) -> bool:
    """``pending -> delivered``, naming the submission it became; False when not pending."""
    return storage.exec(_DELIVERED, submission_id, now, message_id).changed == 1


def mark_failed(storage: Storage, message_id: str, reason: str, now: int) -> bool:
    """``pending -> failed`` with ``reason``; False when not pending."""
    return storage.exec(_FAILED, _cut(reason), now, message_id).changed == 1


def _cut(text: str) -> str:
    if len(text) <= MAX_REASON_CHARS:
        return text
    return text[:MAX_REASON_CHARS] + f"... ({len(text)} characters)"


def inbound_key(message_id: str) -> str:
    """The idempotency key a message's submission holds in its target Thread."""
    key = f"msg:{message_id.replace('#', '.')}"
    try:
        return check_id(key, field="idempotency_key")
    except ValidationFailed:
        return "msg:" + digest(message_id)[:48]


def inbound_submission_id(message_id: str) -> str:
    """The id a message's submission takes at its target: the same on every delivery."""
    return "sub_" + digest("message", message_id)[:32]


def refusal(exc: ThreadlineError) -> str:
    """A refusal's reason as stored and reported: ``Type: message``."""
    return f"{type(exc).__name__}: {exc.message}"


class _Refusal(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def admit_inbound(
    storage: Storage,
    gate: MutationGate,
    agents: AgentRegistry,
    config: RuntimeConfig,
    now: Callable[[], int],
    *,
    message_id: str,
    to_thread: str,
    agent: str | None,
    input_json: str,
    also: Callable[[str], None] | None = None,
) -> Verdict:
    """Admit a message as a submission of ``to_thread``, once whatever the deliveries.

    Its idempotency key and id derive from ``message_id`` (:func:`inbound_key`,
    :func:`inbound_submission_id`): a message delivered again answers with the submission the
    first delivery made. The submission, the native lane's enrollment, the alarm and
    ``also(submission_id)`` (the sender's own bookkeeping, when the message is local) commit
    in one transaction; a refusal writes nothing.

    Refused for good (:class:`~threadline.threads.routing.Refused`): a Thread id or input this
    deployment refuses, an agent it does not register (``BindingUnavailable``), no agent named
    for a new Thread while several are registered, or the key already used with other input.
    Storage failures raise: the delivery is retried.
    """
    if not isinstance(message_id, str) or not 0 < len(message_id) <= MAX_MESSAGE_ID_CHARS:
        return Refused(f"ValidationFailed: a message id is text of 1 to {MAX_MESSAGE_ID_CHARS}"
                       " characters")
    if not isinstance(input_json, str):
        return Refused("ValidationFailed: a message's input is JSON text")
    key = inbound_key(message_id)
    try:
        check_id(to_thread, field="thread")
        if agent is not None:
            check_id(agent, field="agent")
        try:
            value = decode_json(input_json)
        except ValueError:  # too deep is ValidationFailed already
            raise ValidationFailed("input is not JSON text", field="input") from None
        canonical = encode_json(value, field="input", max_depth=config.max_json_depth)
        if len(canonical.encode("utf-8")) > config.max_body_bytes:
            raise ValidationFailed(f"input is larger than {config.max_body_bytes} bytes",
                                   field="input")
        prior = agent_choice.keyed_agent(storage, to_thread, key)
        if prior is not None and agent in (None, prior):
            chosen = prior
        elif agent is not None and agent not in agents:
            raise BindingUnavailable(agent)
        else:
            chosen = agent_choice.choose_agent(storage, agents, to_thread, agent)
    except ThreadlineError as exc:
        return Refused(refusal(exc))
    input_digest = digest(chosen, canonical)
    made = inbound_submission_id(message_id)

    def write() -> Accepted:
        try:
            existing = ledger.keyed(storage, to_thread, key, input_digest)
        except Conflict as exc:
            raise _Refusal(refusal(exc)) from None
        if existing is not None:
            admitted = existing.id
        else:
            at = now()
            ledger.enqueue(storage, submission_id=made, thread_id=to_thread, agent=chosen,
                           idempotency_key=key, input_json=canonical,
                           input_digest=input_digest, now=at)
            gate.record_admission([to_thread])
            admitted = made
        if also is not None:
            also(admitted)
        return Accepted(admitted)

    try:
        return gate.mutate(write, invalidates_recovery=False, threads=(to_thread,))
    except _Refusal as refused:
        return Refused(refused.reason)


__all__ = [
    "MAX_MESSAGE_ID_CHARS",
    "MAX_REASON_CHARS",
    "MESSAGES_LISTED",
    "Message",
    "admit_inbound",
    "claim",
    "due_then_next",
    "enqueue_message",
    "inbound_key",
    "inbound_submission_id",
    "mark_delivered",
    "mark_failed",
    "message_exists",
    "next_due",
    "note_failure",
    "of_submission",
    "refusal",
]
