"""The submission ledger: admission, control-only scans, and operator decisions.

Every write goes through the mutation gate, so the source facts, the lane enrollment and the
alarm commit together (the alarm invariant). Reads that the maintenance pass makes on every
actionable event (:meth:`Ledger.scan_nonterminal`, :meth:`Ledger.read_abort_intent`) touch
control columns only: they never decode inputs, results or the journal. The operator's
decisions (aborts, approvals, Unknown Outcome resolutions) are mixed in from
:mod:`threadline.threads.decisions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.errors import Conflict, NotFound, PayloadTooLarge
from threadline.ids import IdSource
from threadline.storage.port import Row, Storage
from threadline.threads import delayed
from threadline.threads.abort_watch import AbortWatch
from threadline.threads.decisions import OperatorDecisions
from threadline.threads.model import (
    AbortState,
    Admission,
    JsonValue,
    ScheduledSubmission,
    Submission,
    SubmissionState,
    WorkItem,
    check_id,
    check_subject,
    digest,
    encode_json,
)
from threadline.threads.ports import DELAYED, MutationGate, commit_fact

# Every scan names the predicate of the partial index tl_submissions_open (open work, keyed
# dormant, thread, seq), so its cost follows open work, however much settled history the
# object holds. ``settled_at IS NULL`` is ``state <> 'settled'`` (a CHECK ties them), said
# with a column no claim or move touches, so those transitions leave the index alone. One
# Thread's open work is two ranges (dormant 0, then 1), sorted into FIFO order in Python: an
# IN list or an ORDER BY would make workerd bill the rows of a temporary table besides.
# INDEXED BY, because without statistics the planner prefers the (thread_id, seq) key, which
# saves that sort by reading every settled submission of the Thread.
_SCAN_OPEN = (
    "SELECT id, thread_id, seq, agent, state, revision, attempts, not_before, lease_expires_at,"
    " lease_owner, dormant FROM tl_submissions INDEXED BY tl_submissions_open"
    " WHERE settled_at IS NULL ORDER BY thread_id, seq"
)
_THREAD_OPEN = (
    "SELECT id, thread_id, seq, agent, state, revision, attempts, not_before, lease_expires_at,"
    " lease_owner, dormant FROM tl_submissions INDEXED BY tl_submissions_open"
    " WHERE settled_at IS NULL AND dormant = 0 AND thread_id = ?"
    " UNION ALL "
    "SELECT id, thread_id, seq, agent, state, revision, attempts, not_before, lease_expires_at,"
    " lease_owner, dormant FROM tl_submissions INDEXED BY tl_submissions_open"
    " WHERE settled_at IS NULL AND dormant = 1 AND thread_id = ?"
)
# The live range of the index (dormant = 0): Threads with a head that may be claimed, is
# running or is settling (queued, ready, running, terminalizing), however many others sleep
# on a timer or wait for the outside world, with the input held behind them.
_LIVE_THREADS = (
    "SELECT DISTINCT thread_id FROM tl_submissions"
    " WHERE settled_at IS NULL AND dormant = 0 ORDER BY thread_id"
)
_BY_ID = "SELECT * FROM tl_submissions WHERE id = ?"
_BY_KEY = "SELECT * FROM tl_submissions WHERE thread_id = ? AND idempotency_key = ?"
# A Thread's row is written once, by its first admission; later ones find it and write
# nothing there. The next seq is one seek at the end of the Thread's UNIQUE (thread_id, seq)
# range, instead of a counter row rewritten per admission: the read and the insert after it
# run in one synchronous transaction of the object, and the unique key would refuse a
# duplicate seq if anything ever took the same one. (Taking the seq inside the INSERT would
# save a statement but read one row more: SQLite materialises a SELECT from the table it
# inserts into.) An admission gets its row back from the INSERT, without a read of its own.
_CREATE_THREAD = (
    "INSERT INTO tl_threads (id, created_at, updated_at) VALUES (?, ?, ?)"
    " ON CONFLICT (id) DO NOTHING"
)
_NEXT_SEQ = "SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM tl_submissions WHERE thread_id = ?"
_INSERT = (
    "INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key, input_json,"
    " input_digest, state, not_before, created_at, updated_at, submitted_by, message_hops,"
    " message_from) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)"
)
# RETURNING reads the row back (a row read in workerd): only for a caller that answers with it.
_INSERT_RETURNING = _INSERT + " RETURNING *"
_READ_INTENT = (
    "SELECT submission_id, state, reason, requested_at, applied_at, requested_by"
    " FROM tl_abort_intents WHERE submission_id = ?"
)


@dataclass(frozen=True, slots=True)
class DueAdmissions:
    """What one batch of :meth:`Ledger.admit_due` did."""

    admitted: int
    #: The batch was full: more may be due.
    more: bool
    #: When the first submission not due at the batch's time falls due (None: none waits).
    next_due: int | None


@dataclass(frozen=True, slots=True)
class AbortIntent:
    """A durable request to abort a submission."""

    submission_id: str
    state: AbortState
    reason: str | None
    requested_at: int
    applied_at: int | None
    #: The subject of the principal that requested it (None: unknown).
    requested_by: str | None = None


def work_item(row: Row) -> WorkItem:
    """Decode the control columns of a submission row."""
    return WorkItem(
        submission_id=row["id"],
        thread_id=row["thread_id"],
        seq=int(row["seq"]),
        agent=row["agent"],
        state=SubmissionState(row["state"]),
        revision=int(row["revision"]),
        attempts=int(row["attempts"]),
        not_before=row["not_before"],
        lease_expires_at=row["lease_expires_at"],
        lease_owner=row["lease_owner"],
        dormant=bool(row["dormant"]),
    )


class Ledger(OperatorDecisions):
    """The submissions of one object, and every mutation an outside caller may make to them."""

    def __init__(
        self,
        storage: Storage,
        gate: MutationGate,
        *,
        clock: Clock,
        ids: IdSource,
        config: RuntimeConfig,
        aborts: AbortWatch | None = None,
    ) -> None:
        self.storage = storage
        self.gate = gate
        #: Told of every abort this ledger writes, so running Attempts read their intent again.
        self.aborts = aborts if aborts is not None else AbortWatch()
        self.clock = clock
        self.ids = ids
        self.config = config
        #: Open work a caller read just now, handed to the next read of that Thread (see
        #: :meth:`prefetched`).
        self._prefetched: tuple[str, tuple[WorkItem, ...]] | None = None

    @contextmanager
    def prefetched(self, thread_id: str, items: tuple[WorkItem, ...]) -> Iterator[None]:
        """Let the next :meth:`thread_open` of ``thread_id`` inside the block answer with
        ``items`` instead of reading them again.

        For a caller that read the Thread's open work itself and knows nothing changed it
        since (the maintenance pass, from its scan): recovery and the claim that follow it
        would otherwise read the same rows again. One read only; the hint ends with the
        block. Every write decided from it is a compare-and-set on the submission's state
        and revision, so a hint that went stale costs a write that changes nothing, never a
        wrong one.
        """
        self._prefetched = (thread_id, items)
        try:
            yield
        finally:
            self._prefetched = None

    # -- reads -------------------------------------------------------------------------------

    def get(self, submission_id: str) -> Submission:
        """The submission, decoded; :class:`NotFound` when there is none."""
        row = self.storage.exec(_BY_ID, submission_id).first()
        if row is None:
            raise NotFound(f"no submission {submission_id!r}", field="submission")
        return Submission.from_row(row)

    def scan_nonterminal(self) -> list[WorkItem]:
        """Every open submission, ordered by (thread, seq), read through the open-work index."""
        return [work_item(row) for row in self.storage.exec(_SCAN_OPEN)]

    def thread_open(self, thread_id: str) -> list[WorkItem]:
        """The open submissions of one Thread in FIFO order."""
        hint = self._prefetched
        if hint is not None and hint[0] == thread_id:
            self._prefetched = None
            return sorted(hint[1], key=lambda item: item.seq)
        rows = self.storage.exec(_THREAD_OPEN, thread_id, thread_id)
        items = [work_item(row) for row in rows]
        return sorted(items, key=lambda item: item.seq)

    def live_threads(self) -> list[str]:
        """Threads with a submission that is running, terminalizing, or queued or ready and
        not held behind a suspended head.

        Read through the live range of the partial index ``tl_submissions_open``: suspended,
        Unknown and joined submissions, and the input held behind a suspended head, are not
        visited, so the cost follows live work, not sleeping or waiting Threads.
        """
        return [str(row["thread_id"]) for row in self.storage.exec(_LIVE_THREADS)]

    def read_abort_intent(self, submission_id: str) -> AbortIntent | None:
        """The submission's abort intent, if one was ever requested."""
        row = self.storage.exec(_READ_INTENT, submission_id).first()
        if row is None:
            return None
        return AbortIntent(
            submission_id=row["submission_id"],
            state=AbortState(row["state"]),
            reason=row["reason"],
            requested_at=int(row["requested_at"]),
            applied_at=row["applied_at"],
            requested_by=row["requested_by"],
        )

    # -- admission ---------------------------------------------------------------------------

    def admit(
        self,
        thread_id: str,
        agent: str,
        input: JsonValue,
        idempotency_key: str | None = None,
        *,
        not_before: int | None = None,
        subject: str | None = None,
    ) -> Admission:
        """Admit input for a Thread, behind its earlier submissions (FIFO ``seq``).

        The Thread is created by its first admission. With an ``idempotency_key``, the same key
        with the same agent and input returns the existing submission (``created=False``) and
        the same key with anything else raises :class:`Conflict`; a key names one submission
        per Thread whether it was admitted at once or is still scheduled. The submission, the
        Thread's sequence, the native lane's enrollment and the alarm commit in one
        transaction.

        ``not_before`` (epoch ms) delays it: until then it is a :class:`ScheduledSubmission`
        with no place in the FIFO, and input admitted meanwhile goes ahead of it; when it
        falls due it takes the Thread's next seq, under the same id. A due time at or before
        now admits at once; one more than 366 days ahead raises :class:`ValidationFailed`.
        The delayed row, its due time on the ``threadline:delayed`` lane and the alarm commit
        together.

        ``subject`` names the principal that submitted it (``submitted_by``; None: unknown).
        A replay returns the submission as it was made, with the subject of its admission.
        """
        check_id(thread_id, field="thread")
        subject = check_subject(subject)
        check_id(agent, field="agent")
        if idempotency_key is not None:
            check_id(idempotency_key, field="idempotency_key")
        input_json = encode_json(input, field="input", max_depth=self.config.max_json_depth)
        if len(input_json.encode("utf-8")) > self.config.max_body_bytes:
            raise PayloadTooLarge(
                f"input is larger than {self.config.max_body_bytes} bytes", field="input"
            )
        now = self.clock.now_ms()
        due_at = delayed.check_due(not_before, now)
        # Decided once: the path chosen and the gate call that records it must agree.
        later = due_at is not None and due_at > now
        input_digest = digest(agent, input_json)
        if idempotency_key is not None:
            # A replayed admission answers from indexed reads, without a gate transaction.
            existing = keyed(self.storage, thread_id, idempotency_key, input_digest)
            if existing is not None:
                return Admission(existing, created=False)
        submission_id = self.ids.new_id("sub")

        def write() -> Admission:
            if idempotency_key is not None:
                again = keyed(self.storage, thread_id, idempotency_key, input_digest)
                if again is not None:
                    return Admission(again, created=False)
            now = self.clock.now_ms()
            if later:
                assert due_at is not None
                scheduled = delayed.insert(
                    self.storage, submission_id=submission_id, thread_id=thread_id,
                    agent=agent, idempotency_key=idempotency_key, input_json=input_json,
                    input_digest=input_digest, due_at=due_at, now=now, submitted_by=subject,
                )
                self.gate.schedule_fact(DELAYED, due_at)
                return Admission(scheduled, created=True)
            made = enqueue(self.storage, submission_id=submission_id, thread_id=thread_id,
                           agent=agent, idempotency_key=idempotency_key,
                           input_json=input_json, input_digest=input_digest,
                           not_before=due_at, now=now, submitted_by=subject, returning=True)
            assert made is not None
            return Admission(made, created=True)

        if later:
            # No native work yet: only the delayed lane learns of it (see write()).
            return self.gate.mutate(write, invalidates_recovery=False, threads=())
        # A new submission is a real new fact for the native lane, not a replayed hint.
        return commit_fact(self.gate, write, thread=thread_id)

    def find(self, submission_id: str) -> Submission | ScheduledSubmission:
        """The submission, admitted or still scheduled; :class:`NotFound` when neither."""
        try:
            return self.get(submission_id)
        except NotFound:
            waiting = delayed.get(self.storage, submission_id)
            if waiting is None:
                raise
            return waiting.submission

    def admit_due(
        self, now: int, limit: int, *, also: Callable[[], None] | None = None
    ) -> DueAdmissions:
        """Admit up to ``limit`` delayed submissions due at ``now``.

        Each takes its Thread's next seq, in due order (those due at the same instant in the
        order they were made), keeping its id. One gate transaction: the moves, the native
        lane's enrollment, the generation (naming the Threads) and the alarm, with ``also``
        (a lane wave's progress) inside it. One statement reads both answers from the due
        index: the rows due, and the first that is not (when the next one falls due).

        ``also`` runs whether or not anything was admitted: a batch that finds nothing due
        (its earliest row aborted since the lane took that deadline) has still done all
        there was to do, and learnt when the lane is next due.
        """

        def write() -> DueAdmissions:
            due, next_due = delayed.due_then_next(self.storage, now, limit)
            threads = [row.thread_id for row in due if admit_delayed(self.storage, row, now)]
            if threads:
                self.gate.record_admission(threads)
            if also is not None:
                also()
            # A full batch may leave some due: the next one's time is then now.
            return DueAdmissions(len(threads), more=len(due) == limit, next_due=next_due)

        return self.gate.mutate(write, invalidates_recovery=False, threads=())

    def _admit_delayed(self, row: delayed.Delayed, now: int) -> bool:
        return admit_delayed(self.storage, row, now)


def keyed(
    storage: Storage, thread_id: str, key: str, input_digest: str
) -> Submission | ScheduledSubmission | None:
    """The Thread's submission made with ``key``, admitted or still scheduled, or None.

    A key names one submission per Thread wherever it stands: a replay with other input (a
    different ``input_digest``) raises :class:`Conflict`.
    """
    row = storage.exec(_BY_KEY, thread_id, key).first()
    found: Submission | ScheduledSubmission
    if row is not None:
        stored, found = str(row["input_digest"]), Submission.from_row(row)
    else:
        waiting = delayed.by_key(storage, thread_id, key)
        if waiting is None:
            return None
        stored, found = waiting.input_digest, waiting.submission
    if stored != input_digest:
        raise Conflict(
            f"idempotency key {key!r} was already used with other input",
            field="idempotency_key",
        )
    return found


def enqueue(
    storage: Storage,
    *,
    submission_id: str,
    thread_id: str,
    agent: str,
    idempotency_key: str | None,
    input_json: str,
    input_digest: str,
    now: int,
    not_before: int | None = None,
    created_at: int | None = None,
    submitted_by: str | None = None,
    message_hops: int = 0,
    message_from: str | None = None,
    returning: bool = False,
) -> Submission | None:
    """Write a new queued submission at the end of its Thread's FIFO (creating the Thread).

    Inside the caller's gate transaction, which records the admission (new native work).
    ``submitted_by`` is the subject of the principal that submitted it, if one did;
    ``message_hops`` the hop count of the message it is admitted from, or of the submission
    whose agent submitted it (0: none), and
    ``message_from`` where that message was sent from (``<space>/<thread>``). With
    ``returning`` the submission comes back as written (one row read more), else None.
    """
    storage.exec(_CREATE_THREAD, thread_id, now, now)
    seq = int(storage.exec(_NEXT_SEQ, thread_id).one()["seq"])
    written = storage.exec(
        _INSERT_RETURNING if returning else _INSERT, submission_id, thread_id, seq, agent,
        idempotency_key, input_json, input_digest, not_before,
        now if created_at is None else created_at, now, submitted_by, message_hops,
        message_from,
    )
    return Submission.from_row(written.one()) if returning else None


def admit_delayed(storage: Storage, row: delayed.Delayed, now: int) -> bool:
    """Move a delayed submission into its Thread's FIFO: the next seq, under the same id, key
    and creation time, its due time as the ``not_before`` no Attempt precedes. False, having
    written nothing, when it is no longer waiting. Inside the caller's gate transaction, which
    records the admission."""
    if not delayed.take(storage, row):
        return False
    enqueue(storage, submission_id=row.id, thread_id=row.thread_id, agent=row.agent,
            idempotency_key=row.idempotency_key, input_json=row.input_json,
            input_digest=row.input_digest, now=now, not_before=row.due_at,
            created_at=row.created_at, submitted_by=row.submitted_by,
            message_hops=row.message_hops)
    return True


__all__ = [
    "AbortIntent",
    "DueAdmissions",
    "Ledger",
    "admit_delayed",
    "enqueue",
    "keyed",
    "work_item",
]
