"""Binding waits: heads whose agent this deployment does not register.

Such a head cannot run here, and retrying it every pass would cost an invocation and a log
line each time for nothing. It is parked instead: one ``tl_binding_waits`` row, reported once
(a log line, and a ``parked`` event in the recovery-event log for the host hook). A parked
Thread is a stable external wait: it keeps no alarm armed and survives eviction dormant.

Only a deployment that changes the agent registry can unpark it. The registry key (a hash of
the registered agent names and versions) is stored in the generation record; when a new
incarnation starts with another key, :meth:`BindingWaits.reconcile` deletes every wait and
creates exactly one new native opportunity, in one gate transaction.
"""

from __future__ import annotations

from threadline.maintenance.faults import EventAppender, EventDraft
from threadline.scheduling import state
from threadline.scheduling.due_queue import NATIVE


class _Unread:
    """Marks that the caller did not read the stored registry key (None is a valid key)."""


_UNREAD = _Unread()

_SELECT_WAIT = "SELECT submission_id FROM tl_binding_waits WHERE submission_id = ?"
_INSERT_WAIT = """
INSERT INTO tl_binding_waits (submission_id, thread_id, agent, parked_at) VALUES (?, ?, ?, ?)
ON CONFLICT (submission_id) DO NOTHING
"""
_SELECT_PARKED_THREADS = "SELECT DISTINCT thread_id FROM tl_binding_waits"
_SELECT_PARKED_SUBMISSIONS = "SELECT submission_id FROM tl_binding_waits"
_SELECT_WAITS = """
SELECT submission_id, thread_id, agent, parked_at FROM tl_binding_waits
ORDER BY thread_id, submission_id
"""
_DELETE_WAIT = "DELETE FROM tl_binding_waits WHERE submission_id = ?"
_DELETE_ALL = "DELETE FROM tl_binding_waits"
# A wait outlives its reason once its submission settled (aborted, or repaired elsewhere).
_PRUNE = """
DELETE FROM tl_binding_waits WHERE NOT EXISTS (
    SELECT 1 FROM tl_submissions s
    WHERE s.id = tl_binding_waits.submission_id AND s.state <> 'settled'
)
"""


class BindingWaits(EventAppender):
    """The durable binding waits of one object.

    Only it writes them in an incarnation, so it remembers the parked submissions it last
    read outside a transaction (:meth:`parked_submissions`) until its next write.
    """

    #: ``parked_submissions()`` as last read outside a transaction, until the next write.
    _known: frozenset[str] | None = None

    def park(self, thread_id: str, submission_id: str, agent: str) -> bool:
        """Park ``submission_id`` (the head of ``thread_id``) until the registry changes.

        True when newly parked: the log line is written first, then one gate transaction
        commits the wait with its ``parked`` event (and the events lane's enrollment and
        alarm). An eviction between the two may repeat the log line on the next pass, never
        lose it; the event is appended exactly once with the wait. Parking a submission that
        is already parked reads one row and changes nothing.
        """
        if self._storage.exec(_SELECT_WAIT, submission_id).first() is not None:
            return False
        self._log(
            f"threadline: thread {thread_id!r} parked until its agent {agent!r} is registered; "
            f"submission {submission_id!r} stays pending"
        )

        self._known = None

        def body() -> bool:
            now = self._clock.now_ms()
            inserted = (
                self._storage.exec(_INSERT_WAIT, submission_id, thread_id, agent, now).changed == 1
            )
            if inserted:
                self._append([EventDraft("parked", thread_id, None, submission_id, agent)])
            return inserted

        return self._gate.mutate(body, invalidates_recovery=False)

    def release(self, submission_id: str) -> bool:
        """Forget the wait of ``submission_id`` (its head ran after all); True if there was one.

        A single statement, safe inside the caller's transaction; releasing twice changes
        nothing. It creates no native work by itself: the head was just processed.
        """
        self._known = None
        return self._storage.exec(_DELETE_WAIT, submission_id).changed == 1

    def prune(self) -> int:
        """Delete the waits whose submission is settled or gone; return how many.

        For the pass's checkpoint (one statement, inside its transaction): the scan is over
        the waits, each checked by primary key, never over the ledger.
        """
        self._known = None
        return self._storage.exec(_PRUNE).changed

    def parked_threads(self) -> frozenset[str]:
        """Threads with a binding wait (their head is parked until its submission settles)."""
        return frozenset(
            str(row["thread_id"]) for row in self._storage.exec(_SELECT_PARKED_THREADS)
        )

    def parked_submissions(self) -> frozenset[str]:
        """Submissions parked on a binding wait. A wait holds the head it was made for, not
        its Thread: once that head settles, the next one is judged (and parked) on its own."""
        if self._known is not None:
            return self._known
        read = frozenset(
            str(row["submission_id"]) for row in self._storage.exec(_SELECT_PARKED_SUBMISSIONS)
        )
        if not self._storage.in_transaction():
            # Read inside a transaction, it could include writes that roll back.
            self._known = read
        return read

    def waits(self) -> list[tuple[str, str, str, int]]:
        """Every wait as ``(thread_id, submission_id, agent, parked_at)`` (operators, tests)."""
        return [
            (str(r["thread_id"]), str(r["submission_id"]), str(r["agent"]), int(r["parked_at"]))
            for r in self._storage.exec(_SELECT_WAITS)
        ]

    def reconcile(self, registry_key: str, *, stored: str | _Unread | None = _UNREAD) -> bool:
        """Adopt this deployment's agent registry key; True when it changed.

        With the stored key it reads one row and writes nothing, so parked work stays dormant
        across evictions of one deployment. With another key, one gate transaction stores it
        (compare-and-set), deletes every binding wait and records native progress: ``dirty``
        advances once and the native lane is due now with its alarm, which is exactly one new
        opportunity for every parked head. A racing duplicate loses the compare-and-set and
        changes nothing. ``stored`` is the key of a generation record the caller already
        read (a pass's begin), which saves that row read.
        """
        if isinstance(stored, _Unread):
            stored = state.read_state(self._storage).binding_registry_key
        if stored == registry_key:
            return False

        self._known = None

        def body() -> bool:
            if not state.set_binding_registry_key(self._storage, registry_key):
                return False
            self._storage.exec(_DELETE_ALL)
            self._gate.record_progress((NATIVE,))
            return True

        return self._gate.mutate(body, invalidates_recovery=False)


__all__ = ["BindingWaits"]
