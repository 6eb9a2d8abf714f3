"""Classification of one Thread's open work, state by state, at its boundaries."""

from __future__ import annotations

from typing import Any

from threadline.errors import StorageError
from threadline.maintenance.view import Need, ThreadView, classify
from threadline.threads.model import SubmissionState, WorkItem

NOW = 1_000_000


class _Unreadable:
    """Storage whose every read fails, as a Thread's corrupt wait rows would."""

    def exec(self, sql: str, *params: Any) -> Any:
        raise StorageError("database disk image is malformed")


def _item(state: SubmissionState, *, seq: int = 1, not_before: int | None = None,
          expires: int | None = None, owner: str | None = None) -> WorkItem:
    return WorkItem(f"s{seq}", "t1", seq, "echo", state, 1, 0, not_before, expires, owner)


def _view(*items: WorkItem, active: frozenset[str] = frozenset(),
          storage: Any = None) -> ThreadView:
    (view,) = classify(storage, items, NOW, active=active, faults={}, parked=set(),
                       registered={"echo"})
    return view


def _need(item: WorkItem) -> tuple[Need, int | None]:
    view = _view(item)
    return view.need, view.due_at


def test_a_claim_of_another_incarnation_is_recovered_at_once() -> None:
    running = SubmissionState.RUNNING
    assert _need(_item(running, expires=NOW + 60_000, owner="inc-old/lease-1")) == (
        Need.RECOVER, None)


def test_a_claim_of_unknown_incarnation_waits_for_its_lease() -> None:
    running = SubmissionState.RUNNING
    assert _need(_item(running, expires=NOW + 60_000, owner="lease-1")) == (
        Need.TIMED, NOW + 60_000)
    assert _need(_item(running, expires=NOW + 60_000)) == (Need.TIMED, NOW + 60_000)
    assert _need(_item(running, expires=NOW + 1, owner="lease-1")) == (Need.TIMED, NOW + 1)
    # At its expiry, or without any, the claim is recovery's to decide.
    assert _need(_item(running, expires=NOW, owner="lease-1")) == (Need.RECOVER, None)
    assert _need(_item(running, expires=None, owner="lease-1")) == (Need.RECOVER, None)


def test_a_backoff_runs_at_its_not_before_and_not_earlier() -> None:
    ready = SubmissionState.READY
    assert _need(_item(ready, not_before=NOW + 1)) == (Need.TIMED, NOW + 1)
    assert _need(_item(ready, not_before=NOW)) == (Need.RUNNABLE, None)
    assert _need(_item(ready)) == (Need.RUNNABLE, None)


def test_the_view_names_the_head_after_recovered_uncertainty() -> None:
    unknown = _item(SubmissionState.UNKNOWN, seq=1)
    queued = _item(SubmissionState.QUEUED, seq=2)
    view = _view(unknown, queued)
    assert view.head == queued and view.submission_ids == ("s1", "s2")
    assert view.need is Need.RUNNABLE


def test_an_unclassifiable_thread_goes_to_recovery_and_an_active_one_is_not_read() -> None:
    suspended = _item(SubmissionState.SUSPENDED)
    assert _view(suspended, storage=_Unreadable()).need is Need.RECOVER
    active = _view(suspended, storage=_Unreadable(), active=frozenset({"t1"}))
    assert active.need is Need.ACTIVE
