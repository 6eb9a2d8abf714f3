"""Compare-and-set state transitions of ``tl_submissions``.

Every transition names the state and revision it expects (``WHERE id = ? AND state = ? AND
revision = ?``) and bumps the revision. If anything moved the submission in between (another
Attempt, a recovery, an operator) the statement matches no row, nothing changes, and the caller
learns it from the row count. That is why running any transition twice is harmless: the second
run expects a revision that no longer exists. Callers run these inside a gate transaction.
"""

from __future__ import annotations

from threadline.storage.port import Row, Storage
from threadline.threads import followups, history, waits
from threadline.threads.failed_attempts import APPEND_FAILURE, append_params, failure_entry
from threadline.threads.model import (
    AbortState,
    JsonValue,
    LossCause,
    Outcome,
    SubmissionState,
    WorkItem,
    decode_json,
    encode_json,
)
from threadline.threads.records import SUBMISSION_SETTLED

# The first claim also notes where the Thread's log ends (``history_from``): every record of
# the submission follows it, so finding them reads the log from there, not from its start. In
# the claim's own UPDATE (the row is written anyway) and only once: a later claim keeps it.
# The claimed row comes back from the UPDATE itself, with the state of its abort intent if it
# has one, so the Attempt starts with neither read (see threadline.threads.abort_watch).
_CLAIM = (
    "UPDATE tl_submissions SET state = 'running', attempts = attempts + 1,"
    " revision = revision + 1, lease_owner = ?, lease_expires_at = ?, not_before = NULL,"
    " history_from = COALESCE(history_from, (SELECT COALESCE(MAX(h.seq), 0)"
    " FROM tl_history h WHERE h.thread_id = tl_submissions.thread_id)),"
    " updated_at = ? WHERE id = ? AND state = ? AND revision = ?"
    " RETURNING *, (SELECT a.state FROM tl_abort_intents a"
    " WHERE a.submission_id = tl_submissions.id) AS abort_state"
)
# ``dormant`` (1 exactly in the DORMANT states, by a CHECK) is set only by a move that crosses
# into or out of them: an UPDATE that sets it rewrites the live index's entry, a billed row.
# A move or a settlement out of ``running`` ends an Attempt. Unless that Attempt was lost
# (its loss counted by _COUNT_LOSS in the same transaction), it ended some other way, and the
# losses before it are no longer in a row: ``loss_streak`` is given 0 (else NULL, kept). In the
# UPDATE that ends the Attempt anyway, so the row written is the same one.
# An Attempt that failed also adds its error to the submission's failures, in the same UPDATE
# (threadline.threads.failed_attempts); every other move and settlement passes NULL there.
_MOVE_SET = (
    "UPDATE tl_submissions SET state = ?, revision = revision + 1, lease_owner = NULL,"
    " lease_expires_at = NULL, not_before = ?, attempts = attempts - ?,"
    " error_json = COALESCE(?, error_json), loss_streak = COALESCE(?, loss_streak), "
)
_MOVE_ACROSS_SET = (
    "UPDATE tl_submissions SET state = ?, dormant = ?, revision = revision + 1,"
    " lease_owner = NULL, lease_expires_at = NULL, not_before = ?, attempts = attempts - ?,"
    " error_json = COALESCE(?, error_json), loss_streak = COALESCE(?, loss_streak), "
)
_SETTLE_SET = (
    "UPDATE tl_submissions SET state = 'settled', outcome = ?, result_json = ?, error_json = ?,"
    " dormant = 0, revision = revision + 1, lease_owner = NULL, lease_expires_at = NULL,"
    " not_before = NULL, loss_streak = COALESCE(?, loss_streak), settled_at = ?, "
)
_AT_REVISION = ", updated_at = ? WHERE id = ? AND state = ? AND revision = ?"
_MOVE = _MOVE_SET + APPEND_FAILURE + _AT_REVISION
_MOVE_ACROSS = _MOVE_ACROSS_SET + APPEND_FAILURE + _AT_REVISION
_SETTLE = _SETTLE_SET + APPEND_FAILURE + _AT_REVISION + " RETURNING submitted_by, message_from"
# A lost claim is readied in one UPDATE that also counts the loss: no row more than the move
# it replaces, and running -> ready stays out of the open-work index as every move does.
_LOSE = (
    "UPDATE tl_submissions SET state = 'ready', revision = revision + 1, lease_owner = NULL,"
    " lease_expires_at = NULL, not_before = NULL, error_json = ?, losses = losses + 1,"
    " loss_streak = ?, loss_position = ?, loss_cause = ?, updated_at = ?"
    " WHERE id = ? AND state = 'running' AND revision = ?"
)
# Counts the loss of a claim that something else then ends in the same transaction (a
# settlement, an Unknown Outcome): the revision is left for that end's compare-and-set, and
# that end, told the loss was counted, keeps the streak.
_COUNT_LOSS = (
    "UPDATE tl_submissions SET losses = losses + 1, loss_streak = ?, loss_position = ?,"
    " loss_cause = ? WHERE id = ? AND state = 'running' AND revision = ?"
)
# Queued input behind a suspended head leaves the live range with it (see hold_followers):
# one range of the open-work index, and only while that head is still suspended at the revision
# the pass saw. Releasing reads the Thread's dormant range: its held input and its waits.
_HOLD = (
    "UPDATE tl_submissions INDEXED BY tl_submissions_open SET dormant = 1"
    " WHERE settled_at IS NULL AND dormant = 0 AND thread_id = ? AND seq > ?"
    " AND state IN ('queued', 'ready')"
    " AND EXISTS (SELECT 1 FROM tl_submissions WHERE id = ? AND state = 'suspended'"
    " AND revision = ?)"
)
_RELEASE = (
    "UPDATE tl_submissions INDEXED BY tl_submissions_open SET dormant = 0"
    " WHERE settled_at IS NULL AND dormant = 1 AND thread_id = ?"
    " AND state IN ('queued', 'ready')"
)
# Both name who caused the settlement for its record, from the rows they write anyway: no
# statement more than the settlement needs without them.
_APPLY_ABORT = (
    "UPDATE tl_abort_intents SET state = 'applied', applied_at = ?"
    " WHERE submission_id = ? AND state = 'accepted' RETURNING requested_by"
)
_READ_INTENT_STATE = "SELECT state FROM tl_abort_intents WHERE submission_id = ?"
_READ_INTENT_REASON = "SELECT state, reason FROM tl_abort_intents WHERE submission_id = ?"

#: Open states that wait on the outside world: out of the live index (``dormant = 1``).
#: Queued or ready input behind a suspended head may be dormant too (:func:`hold_followers`).
DORMANT = frozenset({SubmissionState.SUSPENDED, SubmissionState.UNKNOWN, SubmissionState.JOINED})
#: States a submission settles from that no input can have been joined into: it never ran.
_NEVER_JOINED_INTO = frozenset({SubmissionState.QUEUED, SubmissionState.JOINED})


def claim(
    storage: Storage,
    submission_id: str,
    *,
    state: SubmissionState,
    revision: int,
    lease_owner: str,
    lease_expires_at: int,
    now: int,
) -> Row | None:
    """``queued|ready -> running`` under a new lease, charging one attempt: the claimed row
    as written (plus ``abort_state``: its abort intent's state, None without one), or None
    (nothing written) when it is no longer at ``(state, revision)``."""
    return storage.exec(
        _CLAIM, lease_owner, lease_expires_at, now, submission_id, state.value, revision
    ).first()


def move(
    storage: Storage,
    submission_id: str,
    *,
    state: SubmissionState,
    revision: int,
    to: SubmissionState,
    now: int,
    not_before: int | None = None,
    refund_attempt: bool = False,
    error: JsonValue = None,
    thread_id: str | None = None,
    loss_counted: bool = False,
) -> bool:
    """Move an open submission to another open state, dropping any lease.

    ``refund_attempt`` un-charges the attempt a yielded claim took; ``error`` keeps the last
    failure visible on a submission waiting to be retried, and, given with a move out of
    ``running`` whose Attempt was not lost, is added to its failures (retried at
    ``not_before``; see :mod:`threadline.threads.failed_attempts`). A move out of ``suspended``
    releases the input held behind it (:func:`release_followers`), so it needs the
    submission's ``thread_id``. A move out of ``running`` ends an Attempt and restarts the
    submission's loss streak, unless ``loss_counted``: that Attempt was lost, its loss
    counted by :func:`count_loss` in this transaction.
    """
    if to is SubmissionState.SETTLED:
        raise ValueError("use settle() to settle a submission")
    if state is SubmissionState.SUSPENDED and thread_id is None:
        raise ValueError("a move out of suspended releases its Thread's input: name the thread")
    dormant = to in DORMANT
    crossing = (_MOVE_ACROSS, to.value, int(dormant)) if dormant != (state in DORMANT) else (
        _MOVE, to.value)
    failed = None if state is not SubmissionState.RUNNING or loss_counted else failure_entry(
        error, at=now, final=False,
        retry_at=not_before if to is SubmissionState.READY else None)
    written = storage.exec(
        *crossing,
        not_before,
        1 if refund_attempt else 0,
        None if error is None else encode_json(error),
        _streak_after(state, loss_counted),
        *append_params(failed),
        now,
        submission_id,
        state.value,
        revision,
    ).changed
    if written != 1:
        return False
    if thread_id is not None and state is SubmissionState.SUSPENDED:
        release_followers(storage, thread_id)
    return True


def lose(
    storage: Storage,
    submission_id: str,
    *,
    revision: int,
    now: int,
    error: JsonValue,
    streak: int,
    position: int,
    cause: LossCause,
) -> bool:
    """``running -> ready`` for a claim lost without failing: the loss counted (``streak`` in
    a row at journal ``position``) and ``error`` recorded."""
    written = storage.exec(
        _LOSE, encode_json(error), streak, position, cause.value, now, submission_id, revision
    ).changed
    return written == 1


def count_loss(
    storage: Storage,
    submission_id: str,
    *,
    revision: int,
    streak: int,
    position: int,
    cause: LossCause,
) -> bool:
    """Count the loss of a running claim, leaving the claim for the transition that ends it
    next, in the same transaction, at the same ``revision`` (given ``loss_counted``, so that
    it keeps the streak counted here)."""
    written = storage.exec(
        _COUNT_LOSS, streak, position, cause.value, submission_id, revision
    ).changed
    return written == 1


def settle(
    storage: Storage,
    submission_id: str,
    *,
    thread_id: str,
    state: SubmissionState,
    revision: int,
    outcome: Outcome,
    now: int,
    result_json: str | None = None,
    error: JsonValue = None,
    loss_counted: bool = False,
    joined_to: str | None = None,
    resolved_by: str | None = None,
    abort_pending: bool = True,
) -> bool:
    """Settle once: the submission, its open waits, its abort intent and its
    ``submission.settled`` record in the Thread's log, written once by this compare-and-set;
    then the input joined into it (:mod:`threadline.threads.followups`), each with the same
    outcome, its own settlement and its own settled record (which names the head,
    ``joined_to``).

    Settling a ``running`` submission ends its Attempt: as for :func:`move`, that restarts
    the loss streak unless ``loss_counted``; settling it ``failed`` with ``error`` (an Attempt
    that failed, not one lost) adds that error to its failures, marked final. Returns False,
    having changed nothing, when the submission is no longer at ``(state, revision)`` (it was
    settled, or moved, by someone else first).

    The record names who caused what it reports, each only when known: ``submitted_by``
    (whoever submitted it), ``aborted_by`` (whoever requested the abort an aborted
    submission settles by) and ``resolved_by`` (given: whoever resolved its Unknown Outcome
    by aborting it).

    ``abort_pending=False`` says the caller knows, in this transaction, that the submission
    has no accepted abort intent (:mod:`threadline.threads.abort_watch`): there is none to
    mark applied, so that statement is skipped.
    """
    error_json = None if error is None else encode_json(error)
    failed = failure_entry(error, at=now, final=True, retry_at=None) if (
        outcome is Outcome.FAILED and state is SubmissionState.RUNNING and not loss_counted
    ) else None
    settled = storage.exec(
        _SETTLE, outcome.value, result_json, error_json, _streak_after(state, loss_counted),
        now, *append_params(failed), now, submission_id, state.value, revision,
    )
    if settled.changed != 1:
        return False
    if state is SubmissionState.SUSPENDED:
        release_followers(storage, thread_id)
    if state is not SubmissionState.RUNNING:
        # A running submission has no open wait: a wait opens only with the move out of
        # running that it causes (suspended, unknown), in one transaction, and a submission
        # leaves those states for ready only once it has no wait left open. So only a
        # settlement from another state has waits to cancel.
        waits.cancel_open(storage, submission_id, now=now)
    intent = storage.exec(_APPLY_ABORT, now, submission_id).first() if abort_pending else None
    body: dict[str, JsonValue] = {"submission_id": submission_id, "outcome": outcome.value}
    if result_json is not None:
        body["result"] = decode_json(result_json)
    if error is not None:
        body["error"] = error
    if joined_to is not None:
        body["joined_to"] = joined_to
    written = settled.one()
    if written["submitted_by"] is not None:
        body["submitted_by"] = written["submitted_by"]
    if written["message_from"] is not None:
        body["message_from"] = written["message_from"]
    if outcome is Outcome.ABORTED and intent is not None and intent["requested_by"] is not None:
        body["aborted_by"] = intent["requested_by"]
    if resolved_by is not None:
        body["resolved_by"] = resolved_by
    history.append_history(
        storage,
        record_id=f"{submission_id}:settled",
        thread_id=thread_id,
        submission_id=submission_id,
        kind=SUBMISSION_SETTLED,
        # The result inside was checked when it was encoded; the envelope adds one level.
        body_json=encode_json(body, max_depth=None),
        now=now,
    )
    if state not in _NEVER_JOINED_INTO:
        for follower, follower_revision in followups.joined_to(storage, thread_id,
                                                                submission_id):
            # Read in this transaction, so the compare-and-set holds; through the module's
            # own name, so that whatever wraps ``settle`` sees these settlements too.
            settle(storage, follower, thread_id=thread_id, state=SubmissionState.JOINED,
                   revision=follower_revision, outcome=outcome, now=now,
                   result_json=result_json, error=error, joined_to=submission_id)
    return True


def _streak_after(state: SubmissionState, loss_counted: bool) -> int | None:
    """The ``loss_streak`` a transition out of ``state`` writes: 0 when it ends an Attempt
    that was not lost, else None (the streak is kept)."""
    return 0 if state is SubmissionState.RUNNING and not loss_counted else None


def hold_followers(storage: Storage, head: WorkItem) -> int:
    """Make the queued or ready input behind ``head``, a suspended head, dormant; how many.

    Nothing behind it can run before it leaves the suspension, and that is the only thing
    that ends the hold: every move or settlement out of ``suspended`` releases the Thread's
    held input in the same statements (:func:`release_followers`). So a Thread waiting on an
    approval or a far timer is not read by every actionable pass; its wait brings it back (a
    decision or an abort is a gate transaction naming the Thread, a timer falls due through
    the open waits' due index). Compare-and-set: nothing is held unless ``head`` is still
    suspended at its revision. Run it inside a transaction.
    """
    return storage.exec(_HOLD, head.thread_id, head.seq, head.submission_id,
                        head.revision).changed


def release_followers(storage: Storage, thread_id: str) -> int:
    """Make the Thread's held input live again (see :func:`hold_followers`); how many."""
    return storage.exec(_RELEASE, thread_id).changed


def abort_accepted(storage: Storage, submission_id: str) -> bool:
    """True when an abort of the submission was accepted and not yet applied."""
    state = storage.exec(_READ_INTENT_STATE, submission_id).scalar()
    return bool(state == AbortState.ACCEPTED.value)


def aborted_error(reason: str | None) -> dict[str, JsonValue]:
    """The error an aborted submission settles with: the abort's reason, or ``"aborted"``."""
    return {"type": "Aborted", "message": reason or "aborted"}


def accepted_abort(storage: Storage, submission_id: str) -> dict[str, JsonValue] | None:
    """The error to settle with when an abort was accepted and not yet applied, else None.

    It carries the reason given with the abort, so an abort that had to wait for a running
    Attempt to observe it keeps its reason like one that settled at once.
    """
    row = storage.exec(_READ_INTENT_REASON, submission_id).first()
    if row is None or row["state"] != AbortState.ACCEPTED.value:
        return None
    return aborted_error(row["reason"])


__all__ = [
    "DORMANT",
    "abort_accepted",
    "aborted_error",
    "accepted_abort",
    "claim",
    "count_loss",
    "hold_followers",
    "lose",
    "move",
    "release_followers",
    "settle",
]
