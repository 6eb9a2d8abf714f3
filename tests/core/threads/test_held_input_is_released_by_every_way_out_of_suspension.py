"""Input held behind a suspended head (dormant, out of the live range) is made live again by
every transition that takes that head out of the suspension, in the same statement batch; the
hold itself is a compare-and-set on the head, and held input can never be claimed."""

from __future__ import annotations

import pytest

from threadline.errors import StorageError
from threadline.storage import SqliteStorage
from threadline.threads import ledger, transitions
from threadline.threads.model import Outcome, SubmissionState, WorkItem

_THREAD = "INSERT INTO tl_threads (id, created_at, updated_at) VALUES (?, 0, 0)"
_ADMIT = (
    "INSERT INTO tl_submissions (id, thread_id, seq, agent, input_json, input_digest, state,"
    " dormant, created_at, updated_at) VALUES (?, ?, ?, 'a', '{}', 'd', ?, ?, 0, 0)"
)


def _thread(storage: SqliteStorage, thread: str, head: SubmissionState) -> WorkItem:
    """``thread``: a head in state ``head``, then a queued and a ready input."""
    storage.exec(_THREAD, thread)
    storage.exec(_ADMIT, f"{thread}-head", thread, 1, head.value,
                 int(head in transitions.DORMANT))
    storage.exec(_ADMIT, f"{thread}-q", thread, 2, "queued", 0)
    storage.exec(_ADMIT, f"{thread}-r", thread, 3, "ready", 0)
    return WorkItem(f"{thread}-head", thread, 1, "a", head, 0, 0, None, None)


def _live(storage: SqliteStorage) -> set[str]:
    return {row["thread_id"] for row in storage.exec(ledger._LIVE_THREADS)}


def _dormant(storage: SqliteStorage, thread: str) -> list[int]:
    rows = storage.exec("SELECT dormant FROM tl_submissions WHERE thread_id = ? ORDER BY seq",
                        thread)
    return [int(row["dormant"]) for row in rows]


def test_input_behind_a_suspended_head_is_held_only_while_the_head_is_as_seen(
    storage: SqliteStorage,
) -> None:
    head = _thread(storage, "t", SubmissionState.SUSPENDED)
    assert _live(storage) == {"t"}
    # A head that moved since it was seen (another revision) holds nothing.
    stale = WorkItem(head.submission_id, "t", 1, "a", head.state, 7, 0, None, None)
    assert transitions.hold_followers(storage, stale) == 0
    assert transitions.hold_followers(storage, head) == 2
    assert _dormant(storage, "t") == [1, 1, 1]
    assert _live(storage) == set()
    assert transitions.hold_followers(storage, head) == 0  # already held
    # A head that is not suspended holds nothing behind it.
    ready = _thread(storage, "u", SubmissionState.READY)
    assert transitions.hold_followers(storage, ready) == 0
    assert _live(storage) == {"u"}


@pytest.mark.parametrize("out", ["approved", "timer", "aborted"])
def test_every_way_out_of_the_suspension_makes_the_held_input_live(
    storage: SqliteStorage, out: str
) -> None:
    head = _thread(storage, "t", SubmissionState.SUSPENDED)
    assert transitions.hold_followers(storage, head) == 2
    if out == "aborted":
        assert transitions.settle(storage, head.submission_id, thread_id="t",
                                  state=SubmissionState.SUSPENDED, revision=0,
                                  outcome=Outcome.ABORTED, now=5)
        assert _dormant(storage, "t") == [0, 0, 0]
    else:  # a decision or a due timer readies it
        assert transitions.move(storage, head.submission_id, state=SubmissionState.SUSPENDED,
                                revision=0, to=SubmissionState.READY, now=5, thread_id="t")
        assert _dormant(storage, "t") == [0, 0, 0]
    assert _live(storage) == {"t"}


def test_a_move_out_of_suspended_must_name_its_thread(storage: SqliteStorage) -> None:
    head = _thread(storage, "t", SubmissionState.SUSPENDED)
    with pytest.raises(ValueError, match="thread"):
        transitions.move(storage, head.submission_id, state=SubmissionState.SUSPENDED,
                         revision=0, to=SubmissionState.READY, now=5)


def test_held_input_cannot_be_claimed_and_settles_out_of_the_index(
    storage: SqliteStorage,
) -> None:
    head = _thread(storage, "t", SubmissionState.SUSPENDED)
    transitions.hold_followers(storage, head)
    with pytest.raises(StorageError, match="CHECK"):
        transitions.claim(storage, "t-q", state=SubmissionState.QUEUED, revision=0,
                          lease_owner="x", lease_expires_at=10, now=5)
    # Aborting one input that is held settles it like any other.
    assert transitions.settle(storage, "t-q", thread_id="t", state=SubmissionState.QUEUED,
                              revision=0, outcome=Outcome.ABORTED, now=5)
    assert _dormant(storage, "t") == [1, 0, 1]
    assert _live(storage) == set()
