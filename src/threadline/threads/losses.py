"""Attempts lost without failing, counted apart from the Attempts that failed.

An Attempt is *lost* when recovery finds its claim still running with no end recorded: the
object was reset under it (a deploy, an eviction, a crash), this incarnation stopped it at the
alarm event's deadline, or a claim that names no incarnation outlived its lease
(:class:`~threadline.threads.model.LossCause`). None of that is the agent's doing, so a loss
never spends ``max_attempts``: recovery counts it in the submission's ``losses`` and readies
the submission at once, and the budget is charged with ``attempts - losses`` only. A lost
Attempt keeps its place in ``attempts`` (and so the next Attempt's ``turn.attempt`` is one
more), as a failed one does; only an Attempt that suspends or yields gives its number back.
Deploys and evictions cannot use up a submission's retry budget.

A step that brings the object down every time would then be retried for ever. So losses are
also counted in a row: lost Attempts with no Attempt ending otherwise between them (suspending,
yielding, failing, settling, or stepping aside as an Unknown Outcome) and no step finishing
between them. Each Attempt that ends otherwise sets ``loss_streak`` back to 0, in the UPDATE
that ends it (:mod:`threadline.threads.transitions`). The streak is counted at a journal
position, that of the submission's latest finished step (0 before any): a step finishing
moves it, which starts a new streak. So an agent lost once in each of many steps, or once at
each of many deploys days apart with an Attempt suspending in between, is never failed for
it. An operator's decision between two losses (the retry of an Unknown Outcome the first one
left) ends no Attempt and does not break the streak. Once ``max_consecutive_losses`` Attempts
in a row are lost, the submission settles ``failed`` with a ``CrashLoop`` error naming the
position and the bound.

Only recovery of a lost claim reads any of this or counts a loss; an Attempt's other ends
only write the streak back to 0, in the statement that ends them anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadline.storage.port import Storage
from threadline.threads.model import JsonValue, LossCause, WorkItem

#: The error type recorded on a submission whose Attempt was lost.
ATTEMPT_LOST = "AttemptLost"
#: The error type a submission settles ``failed`` with after too many losses in a row.
CRASH_LOOP = "CrashLoop"

_STREAK = "SELECT loss_streak, loss_position FROM tl_submissions WHERE id = ?"
_LOSSES = "SELECT losses FROM tl_submissions WHERE id = ?"
# The submission's entries are one range of the journal's key; only finished ones are progress.
_PROGRESS = (
    "SELECT step_key, position FROM tl_journal WHERE submission_id = ? AND state = 'finished'"
    " ORDER BY position DESC LIMIT 1"
)

_WHAT_HAPPENED = {
    LossCause.RESET: "the Attempt was lost to a reset of the object (a deploy, an eviction or"
                     " a crash) before it settled",
    LossCause.INTERRUPTED: "the Attempt was stopped before it settled, its end unrecorded: the"
                           " alarm event ended (its deadline, or a failed pass) while it ran",
    LossCause.LEASE_EXPIRED: "the Attempt's lease expired before it settled",
}


@dataclass(frozen=True, slots=True)
class Loss:
    """One lost Attempt, as recovery counts it."""

    cause: LossCause
    #: The lost Attempt's number (``turn.attempt``).
    attempt: int
    #: Losses in a row at ``position``, this one included (see the module docstring).
    streak: int
    #: The journal position of the latest finished step, 0 before any.
    position: int
    #: That step's key, None before any.
    step_key: str | None
    #: ``max_consecutive_losses``.
    bound: int

    @property
    def crash_loop(self) -> bool:
        """Whether this loss reaches the bound: the submission settles ``failed``."""
        return self.streak >= self.bound

    def error(self) -> dict[str, JsonValue]:
        """The error recorded for this loss: what happened, never an agent's failure."""
        if self.crash_loop:
            where = ("before any step finished" if self.step_key is None
                     else f"after step {self.step_key!r} finished")
            return {
                "type": CRASH_LOOP, "cause": self.cause.value,
                "message": (
                    f"the Attempt was lost {self.streak} times in a row at journal position"
                    f" {self.position} ({where}), reaching max_consecutive_losses"
                    f" ({self.bound}): what runs next is lost every time, a crash loop;"
                    f" the last loss: {_WHAT_HAPPENED[self.cause]}"
                ),
                "attempt": self.attempt, "in_a_row": self.streak, "position": self.position,
            }
        return {
            "type": ATTEMPT_LOST, "cause": self.cause.value,
            "message": f"{_WHAT_HAPPENED[self.cause]}; retried without spending max_attempts",
            "attempt": self.attempt, "in_a_row": self.streak, "position": self.position,
        }


def assess(storage: Storage, item: WorkItem, cause: LossCause, *, bound: int) -> Loss:
    """Count the loss of ``item``'s running claim, from its streak so far and its journal
    (the submission's row, and its own journal entries: a range of the journal's key).

    The streak goes on only at the position where it was counted; a streak that an Attempt
    ending otherwise set back to 0 starts again at 1 wherever it is.
    """
    row = storage.exec(_STREAK, item.submission_id).one()
    progress = storage.exec(_PROGRESS, item.submission_id).first()
    position = 0 if progress is None else int(progress["position"])
    same_place = row["loss_position"] is not None and int(row["loss_position"]) == position
    streak = int(row["loss_streak"]) + 1 if same_place else 1
    return Loss(cause=cause, attempt=item.attempts, streak=streak, position=position,
                step_key=None if progress is None else str(progress["step_key"]), bound=bound)


def charged(storage: Storage, item: WorkItem) -> int:
    """Attempts of ``item`` charged against ``max_attempts``: its ``attempts`` (suspensions
    and yields gave theirs back) less the lost ones."""
    return item.attempts - int(storage.exec(_LOSSES, item.submission_id).scalar() or 0)


__all__ = ["ATTEMPT_LOST", "CRASH_LOOP", "Loss", "assess", "charged"]
