"""Knowing, without a read, that no abort was requested while an Attempt ran.

An Attempt checks for an accepted abort at every step boundary and again when it settles.
Each check was a read of ``tl_abort_intents``, and aborts are rare: in a busy pass those reads
were three of every twenty statements, all finding nothing.

Every abort intent is written by this object's :class:`~threadline.threads.ledger.Ledger`
(an abort request, or an Unknown Outcome resolved by aborting), and a claim belongs to one
incarnation, so the ledger of that incarnation sees every abort that can arrive while the
claim is held. The ledger counts them (:meth:`AbortWatch.requested`); an Attempt keeps what
it last read of its own intent and the count it read it at (:class:`AbortRead`), taken first
from the claim's own UPDATE. While the count has not moved, what it read still holds; once it
moves (any abort, of any submission, committed or not), the next check reads again. A count
that moves too often costs a read, never a missed abort.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadline.storage.port import Storage
from threadline.threads import transitions


@dataclass(slots=True)
class AbortRead:
    """What an Attempt last read of its abort intent, and the watch's count at that read."""

    count: int
    accepted: bool


class AbortWatch:
    """The aborts one incarnation requested, counted (see the module docstring)."""

    def __init__(self) -> None:
        self._count = 0

    @property
    def count(self) -> int:
        """Aborts requested so far in this incarnation (whether they committed or not)."""
        return self._count

    def requested(self) -> None:
        """Note an abort about to be written: every Attempt's next check reads again."""
        self._count += 1

    def accepted(self, storage: Storage, submission_id: str, known: AbortRead) -> bool:
        """True when an abort of the submission was accepted and not yet applied.

        Answers from ``known`` while no abort was requested since it was read; otherwise
        reads the intent and updates ``known``.
        """
        if known.count != self._count:
            known.accepted = transitions.abort_accepted(storage, submission_id)
            known.count = self._count
        return known.accepted


__all__ = ["AbortRead", "AbortWatch"]
