"""The port through which one space's messages reach another space's object.

``turn.send(space, thread, input)`` writes a message; the ``threadline:messages`` lane delivers
it. Into the sender's own space it is admitted locally, in the transaction that marks it
delivered. Into another space it goes through a :class:`MessageRouter`: in workerd the Worker's
``THREADS`` Durable Object binding (:mod:`threadline.worker`), in tests
:class:`threadline.testing.SimulatedDeployment`. The target admits it idempotently by message
id, so a redelivery (a crash after the target accepted and before the sender recorded it)
finds the submission it made the first time instead of adding one. The envelope carries the
message's hop count, so a chain of messages between spaces ends at the bound
(``RuntimeConfig.max_message_hops``) as one inside a space does.

A router answers :class:`Accepted` or :class:`Refused` (for good: an agent the target does not
register, input it refuses); anything it raises is transient and retried with backoff.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class MessageEnvelope:
    """One message as it travels: who sent it, where to, and its input as JSON text."""

    message_id: str
    from_space: str | None
    from_thread: str
    from_submission: str
    to_space: str
    to_thread: str
    #: The agent to run it at the target; None: the target Thread's latest, else its only one.
    agent: str | None
    input_json: str
    #: The message's hop count (see :class:`~threadline.threads.message_rows.Message`): the
    #: target refuses one past its ``max_message_hops`` and keeps it with the submission.
    hops: int = 1


@dataclass(frozen=True, slots=True)
class Accepted:
    """The target admitted the message (now or on an earlier delivery) as ``submission_id``."""

    submission_id: str


@dataclass(frozen=True, slots=True)
class Refused:
    """The target refused the message for good; ``reason`` says why (``Type: message``)."""

    reason: str


#: What a delivery comes to.
Verdict = Accepted | Refused


class MessageRouter(Protocol):
    """Delivers a message to another space's object and returns its verdict.

    Raising means the outcome is not known (the object could not be reached, the call timed
    out): the message is delivered again later, and the target's idempotency by message id
    makes that safe.
    """

    async def deliver(self, envelope: MessageEnvelope) -> Verdict: ...


def verdict_to_json(verdict: Verdict) -> str:
    """A verdict as the JSON text a target's object returns over RPC."""
    if isinstance(verdict, Accepted):
        return json.dumps({"accepted": True, "submission_id": verdict.submission_id})
    return json.dumps({"accepted": False, "reason": verdict.reason})


def verdict_from_json(text: object) -> Verdict:
    """The verdict in a target's RPC answer; raises ``ValueError`` for anything else (an
    answer the sender cannot read is no verdict: the delivery is retried)."""
    if not isinstance(text, str):
        raise ValueError(f"a message verdict is JSON text, got {type(text).__name__}")
    answer = json.loads(text)
    if isinstance(answer, dict):
        if answer.get("accepted") is True and isinstance(answer.get("submission_id"), str):
            return Accepted(answer["submission_id"])
        if answer.get("accepted") is False and isinstance(answer.get("reason"), str):
            return Refused(answer["reason"])
    raise ValueError(f"not a message verdict: {text[:200]!r}")


__all__ = [
    "Accepted",
    "MessageEnvelope",
    "MessageRouter",
    "Refused",
    "Verdict",
    "verdict_from_json",
    "verdict_to_json",
]
