"""Messages between Threads (``tl_messages``), as sent and as received.

Sending: an Attempt only writes the row, in its own transaction, with an id derived from the
submission and the send's place in it (``<submission id>:send``, ``...:send#2``), so a replay
finds the row instead of sending twice. The row joins the end of its target space's queue
(``seq``) and carries its hop count (``hops``). Each space messages are pending to has one
target row (``tl_message_targets``): due when its oldest pending message goes next, backed off
alone when a call to it fails (:func:`note_failure`), due at once again whenever that message
is settled (:func:`mark_delivered`, :func:`mark_failed`), and gone when nothing is pending to
it. The ``threadline:messages`` lane delivers (:mod:`threadline.maintenance.message_lane`);
a row ends ``delivered`` (with the submission it became) or ``failed`` (with the reason).

Receiving (:func:`admit_inbound`): a message becomes a submission of the target Thread whose
idempotency key and id are derived from the message id, so delivering it again, from the same
space or another, finds that submission instead of adding one. The submission keeps the
message's hop count (``message_hops``), and one past ``max_message_hops`` is refused.

Every read goes through a key or an index: the lane's (the due targets, the next due time) seek
in the targets' due index, a target's oldest message in the partial index of pending rows by
target and ``seq``, a submission's messages are a range of the primary key (their ids start
with the submission's).
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
    " attempts, next_attempt_at, last_error, admitted_as, created_at, delivered_at, failed_at,"
    " seq, hops FROM tl_messages"
)
_EXISTS = "SELECT 1 AS present FROM tl_messages WHERE id = ?"
# A new message joins the end of its target's queue (``seq`` one past the pending ones there).
_INSERT = (
    "INSERT INTO tl_messages (id, from_thread, from_submission, to_space, to_thread, agent,"
    " input_json, next_attempt_at, created_at, hops, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
    " (SELECT coalesce(max(seq), 0) + 1 FROM tl_messages INDEXED BY tl_messages_queue"
    " WHERE state = 'pending' AND to_space = ?))"
    " ON CONFLICT (id) DO NOTHING"
)
# A target that already has a row keeps its time: the new message waits behind the others.
_ADD_TARGET = (
    "INSERT INTO tl_message_targets (space, due_at) VALUES (?, ?) ON CONFLICT (space) DO NOTHING"
)
_TARGET_COLUMNS = "SELECT space, due_at, failures, last_error FROM tl_message_targets"
# Each read is what it returns, however many targets wait later or messages were delivered.
_DUE_TARGETS = _TARGET_COLUMNS + " INDEXED BY tl_message_targets_due ORDER BY due_at LIMIT ?"
_TARGET = _TARGET_COLUMNS + " WHERE space = ?"
_NEXT_DUE = (
    "SELECT due_at FROM tl_message_targets INDEXED BY tl_message_targets_due"
    " ORDER BY due_at LIMIT 1"
)
_HEAD = (
    _SELECT + " INDEXED BY tl_messages_queue WHERE state = 'pending' AND to_space = ?"
    " ORDER BY seq, id LIMIT 1"
)
_QUEUED = (
    "SELECT 1 AS present FROM tl_messages INDEXED BY tl_messages_queue"
    " WHERE state = 'pending' AND to_space = ? LIMIT 1"
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
_TARGET_AT = "UPDATE tl_message_targets SET due_at = ? WHERE space = ?"
_TARGET_FAILED = (
    "UPDATE tl_message_targets SET failures = failures + 1, due_at = ?, last_error = ?"
    " WHERE space = ?"
)
# The target answered (or was not called): its next message goes at once, from a fresh backoff.
_TARGET_NEXT = (
    "UPDATE tl_message_targets SET due_at = ?, failures = 0, last_error = NULL WHERE space = ?"
)
_TARGET_DONE = "DELETE FROM tl_message_targets WHERE space = ?"
_DELIVERED = (
    "UPDATE tl_messages SET state = 'delivered', next_attempt_at = NULL, admitted_as = ?,"
    " delivered_at = ? WHERE id = ? AND state = 'pending' RETURNING to_space"
)
_FAILED = (
    "UPDATE tl_messages SET state = 'failed', next_attempt_at = NULL, last_error = ?,"
    " failed_at = ? WHERE id = ? AND state = 'pending' RETURNING to_space"
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
    #: Its place in its target's queue while pending (None once delivered or failed).
    seq: int | None = None
    #: Messages of its chain up to this one: 1 when the sending submission came from outside
    #: any message, one more than that submission's message otherwise.
    hops: int = 1


@dataclass(frozen=True, slots=True)
class Target:
    """One ``tl_message_targets`` row: a space messages are pending to, and when its oldest
    pending message goes next."""

    space: str
    due_at: int
    #: Calls in a row that did not reach it (the exponent of its backoff).
    failures: int
    last_error: str | None


def _target(row: Row) -> Target:
    return Target(space=str(row["space"]), due_at=int(row["due_at"]),
                  failures=int(row["failures"]), last_error=row["last_error"])


def _message(row: Row) -> Message:
    return Message(
        id=str(row["id"]), from_thread=str(row["from_thread"]),
        from_submission=str(row["from_submission"]), to_space=str(row["to_space"]),
        to_thread=str(row["to_thread"]), agent=row["agent"], input_json=str(row["input_json"]),
        state=str(row["state"]), attempts=int(row["attempts"]),
        next_attempt_at=row["next_attempt_at"], last_error=row["last_error"],
        admitted_as=row["admitted_as"], created_at=int(row["created_at"]),
        delivered_at=row["delivered_at"], failed_at=row["failed_at"], seq=row["seq"],
        hops=int(row["hops"]),
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
    hops: int = 1,
) -> bool:
    """Write a pending message at the end of its target's queue; True when this call added
    it. A target with nothing pending becomes due now; one with messages pending (backing
    off, say) keeps its time, and the new message goes after those."""
    written = storage.exec(
        _INSERT, message_id, from_thread, from_submission, to_space, to_thread, agent,
        input_json, now, now, hops, to_space,
    ).changed
    if written != 1:
        return False
    storage.exec(_ADD_TARGET, to_space, now)
    return True


def due_targets(storage: Storage, now: int, limit: int) -> tuple[list[Target], int | None]:
    """At most ``limit`` targets due at ``now``, earliest first, and when the first target
    after them is due (None: no other has messages pending). One indexed read."""
    targets = [_target(row) for row in storage.exec(_DUE_TARGETS, limit + 1)]
    due = [target for target in targets[:limit] if target.due_at <= now]
    after = targets[len(due):]
    return due, after[0].due_at if after else None


def target(storage: Storage, space: str) -> Target | None:
    """The target row of ``space`` (None: nothing pending to it)."""
    row = storage.exec(_TARGET, space).first()
    return None if row is None else _target(row)


def head(storage: Storage, space: str) -> Message | None:
    """The oldest pending message to ``space``: the one its target delivers next."""
    row = storage.exec(_HEAD, space).first()
    return None if row is None else _message(row)


def next_due(storage: Storage) -> int | None:
    """When the earliest target is due (one indexed row), or None: nothing is pending."""
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
    lost, the message and its target are due again at ``retry_at``, not at once. False when
    the message changed since it was read."""
    if storage.exec(_CLAIM, retry_at, message.id, message.attempts).changed != 1:
        return False
    storage.exec(_TARGET_AT, retry_at, message.to_space)
    return True


def note_failure(storage: Storage, message: Message, error: str, retry_at: int) -> None:
    """Keep the latest transient failure of a pending message, and back its target off to
    ``retry_at``: nothing more goes there before, and the other targets keep their times."""
    cut = _cut(error)
    storage.exec(_NOTE_FAILURE, cut, retry_at, message.id)
    storage.exec(_TARGET_FAILED, retry_at, cut, message.to_space)


def mark_delivered(storage: Storage, message_id: str, submission_id: str, now: int) -> bool:
    """``pending -> delivered``, naming the submission it became, and its target's next
    message due now; False when not pending."""
    row = storage.exec(_DELIVERED, submission_id, now, message_id).first()
    if row is None:
        return False
    _next_in_line(storage, str(row["to_space"]), now)
    return True


def mark_failed(storage: Storage, message_id: str, reason: str, now: int) -> bool:
    """``pending -> failed`` with ``reason``, and its target's next message due now; False
    when not pending."""
    row = storage.exec(_FAILED, _cut(reason), now, message_id).first()
    if row is None:
        return False
    _next_in_line(storage, str(row["to_space"]), now)
    return True


def _next_in_line(storage: Storage, space: str, now: int) -> None:
    if storage.exec(_QUEUED, space).first() is None:
        storage.exec(_TARGET_DONE, space)
    else:
        storage.exec(_TARGET_NEXT, now, space)


def forget_target(storage: Storage, space: str) -> None:
    """Drop the row of a target with nothing pending (it cannot hold the lane due)."""
    if storage.exec(_QUEUED, space).first() is None:
        storage.exec(_TARGET_DONE, space)


def loop_reason(hops: int, bound: int) -> str:
    """Why a message of a chain past the bound fails: ``MessageLoop: ...``."""
    return (f"MessageLoop: the message is hop {hops} of a chain of messages, past the bound "
            f"of {bound} (max_message_hops)")


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
    hops: int = 1,
    from_space: str | None = None,
    from_thread: str | None = None,
    local: bool = False,
    also: Callable[[str], None] | None = None,
) -> Verdict:
    """Admit a message as a submission of ``to_thread``, once whatever the deliveries.

    Its idempotency key and id derive from ``message_id`` (:func:`inbound_key`,
    :func:`inbound_submission_id`): a message delivered again answers with the submission the
    first delivery made. The submission, the native lane's enrollment, the alarm and
    ``also(submission_id)`` (the sender's own bookkeeping, when the message is local) commit
    in one transaction; a refusal writes nothing.

    ``hops`` is the message's hop count (see :class:`Message`); its submission keeps it, so
    what its agent sends goes one hop further. ``from_space`` and ``from_thread`` are where
    the sending object says it was sent; the submission keeps them (``message_from``), and a
    message from a space outside ``config.message_senders`` is refused (``local``: sent in
    this very space, always admitted).

    Refused for good (:class:`~threadline.threads.routing.Refused`): a message past the
    deployment's ``max_message_hops`` (``MessageLoop``), a Thread id or input this deployment
    refuses, an agent it does not register (``BindingUnavailable``), no agent named
    for a new Thread while several are registered, or the key already used with other input.
    Storage failures raise: the delivery is retried.
    """
    if not isinstance(message_id, str) or not 0 < len(message_id) <= MAX_MESSAGE_ID_CHARS:
        return Refused(f"ValidationFailed: a message id is text of 1 to {MAX_MESSAGE_ID_CHARS}"
                       " characters")
    if not isinstance(input_json, str):
        return Refused("ValidationFailed: a message's input is JSON text")
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 1:
        return Refused("ValidationFailed: a message's hop count is an integer of at least 1")
    if hops > config.max_message_hops:
        return Refused(loop_reason(hops, config.max_message_hops))
    senders = config.message_senders
    if not local and senders is not None and from_space not in senders:
        return Refused(f"Forbidden: this space admits messages only from {', '.join(senders)}"
                       if senders else "Forbidden: this space admits no messages from others")
    key = inbound_key(message_id)
    try:
        sender = None  # a sender that does not know its own space's name says nothing
        if from_space is not None and from_thread is not None:
            sender = (f"{check_id(from_space, field='from_space')}/"
                      f"{check_id(from_thread, field='from_thread')}")
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
        agents.check_input(chosen, value)
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
                           input_digest=input_digest, now=at, message_hops=hops,
                           message_from=sender)
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
    "Target",
    "admit_inbound",
    "claim",
    "due_targets",
    "enqueue_message",
    "forget_target",
    "head",
    "inbound_key",
    "inbound_submission_id",
    "loop_reason",
    "mark_delivered",
    "mark_failed",
    "message_exists",
    "next_due",
    "note_failure",
    "of_submission",
    "refusal",
    "target",
]
