"""Follow-up input: input queued behind a running head, joined into it instead of run after it.

An agent registered with ``join_followups=True`` calls :meth:`~threadline.Turn.followups` to
take the input that waits behind it in its Thread (a chat user adding a message while the
model is still answering). The rules, kept few on purpose:

* **What is joined.** The queued submissions right behind the head, in FIFO order, for the
  head's own agent, never started (``queued``) and due: the first one that is not (another
  agent's input, a submission that already ran, one held back by ``not_before``) ends the run,
  and it and everything behind it stay FIFO. At most :data:`MAX_FOLLOWUPS` per call; the rest
  is there for the next call. Input the agent itself submitted to its own Thread is queued
  behind it like any other and is joined the same way.
* **Journaled.** Each call is one journal entry (``followups``, ``followups#2``...) holding
  the ids it joined, an empty list included, written in the transaction that moves those
  submissions ``queued -> joined`` (compare-and-set on their revisions) and fenced by the
  Attempt's claim. A replay of the Attempt meets the entry and gets the same list back, read
  from the joined rows, and joins nothing more for that call; an Attempt that lost its claim
  joins nothing.
* **Settlement.** A joined submission is dormant (out of the live range, as ``DORMANT``
  says) and is never run on its own. It settles with its head's outcome (its result, its
  error, or its abort) in the head's settlement transaction, each with its own settlement
  and its own ``<id>:settled`` record, which names the head (``joined_to``).
* **Everything else follows the head.** A head that fails and is retried, is lost and
  recovered, suspends, or becomes an Unknown Outcome keeps its joined input: the replay sees
  the same list, and the input settles when the head finally does, aborted when the head is.
  Aborting a joined submission on its own is refused (:class:`~threadline.errors.Conflict`,
  409): the agent has already taken its input, so only the head's abort can withdraw it.
* Input that arrives after the last call, or that the agent never collects, runs FIFO after
  the head as any other input does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from threadline.storage.port import Storage
from threadline.threads.model import JsonValue, Submission, SubmissionState, decode_json

#: The most submissions one :meth:`~threadline.Turn.followups` call joins (bounds its reads,
#: its writes and its journal entry).
MAX_FOLLOWUPS = 100

# The live range of the Thread's open work behind the head, in seq order straight from the
# open-work index (dormant and thread fixed, so no sort): what can be joined is queued, hence
# live, while the head runs (input is held dormant only behind a suspended head).
_BEHIND = (
    "SELECT id, agent, state, revision, not_before, input_json FROM tl_submissions"
    " INDEXED BY tl_submissions_open"
    " WHERE settled_at IS NULL AND dormant = 0 AND thread_id = ? AND seq > ?"
    " ORDER BY seq LIMIT ?"
)
# queued -> joined, compare-and-set: it crosses into the dormant states, so it sets dormant.
_JOIN = (
    "UPDATE tl_submissions SET state = 'joined', dormant = 1, joined_to = ?,"
    " revision = revision + 1, updated_at = ?"
    " WHERE id = ? AND state = 'queued' AND revision = ?"
)
_INPUT = "SELECT input_json FROM tl_submissions WHERE id = ? AND joined_to = ?"
# A head's joined input: in its Thread's dormant range of the open-work index, which holds
# only what waits on the outside world, so a settlement with nothing joined reads no row.
_JOINED_OF = (
    "SELECT id, revision FROM tl_submissions INDEXED BY tl_submissions_open"
    " WHERE settled_at IS NULL AND dormant = 1 AND thread_id = ? AND state = 'joined'"
    " AND joined_to = ?"
)


@dataclass(frozen=True, slots=True)
class Followup:
    """One submission joined into the running one: its id and its input, as admitted."""

    submission_id: str
    input: JsonValue


def join(
    storage: Storage, head: Submission, *, now: int, limit: int = MAX_FOLLOWUPS
) -> list[Followup]:
    """Move the joinable input behind ``head`` to ``joined`` (see the module docstring).

    Run inside the transaction that journals the call, fenced by the head's claim.
    """
    joined: list[Followup] = []
    for row in storage.exec(_BEHIND, head.thread_id, head.seq, limit):
        if (row["state"] != SubmissionState.QUEUED.value or row["agent"] != head.agent
                or (row["not_before"] is not None and int(row["not_before"]) > now)):
            break
        if storage.exec(_JOIN, head.id, now, row["id"], int(row["revision"])).changed != 1:
            break
        joined.append(Followup(str(row["id"]), decode_json(row["input_json"])))
    return joined


def replayed(storage: Storage, head_id: str, ids: Sequence[str]) -> list[Followup]:
    """The list a journaled call returned: the submissions it joined, read back in order."""
    found: list[Followup] = []
    for submission_id in ids:
        row = storage.exec(_INPUT, submission_id, head_id).first()
        if row is None:
            raise ValueError(f"journaled follow-up {submission_id!r} was not joined to {head_id!r}")
        found.append(Followup(submission_id, decode_json(row["input_json"])))
    return found


def joined_to(storage: Storage, thread_id: str, head_id: str) -> list[tuple[str, int]]:
    """The open submissions joined into ``head_id``: ``(id, revision)`` each."""
    return [(str(row["id"]), int(row["revision"]))
            for row in storage.exec(_JOINED_OF, thread_id, head_id)]


__all__ = ["MAX_FOLLOWUPS", "Followup", "join", "joined_to", "replayed"]
