"""The gate tells a running pass which Threads the generation advances since a point changed,
when every producer named them, and says it cannot tell otherwise."""

from __future__ import annotations

from threadline.clock import ManualClock
from threadline.scheduling import NATIVE, Scheduler
from threadline.scheduling.gate import TOUCHED_REMEMBERED
from threadline.storage import SqliteStorage
from threadline.threads.ports import commit_fact


def _fact(sched: Scheduler, thread: str | None) -> None:
    commit_fact(sched.gate, lambda: None, thread=thread)


def test_the_gate_names_the_threads_changed_since_a_generation(sched: Scheduler) -> None:
    since = sched.gate.generations
    assert sched.gate.changed_threads(since) == frozenset()
    _fact(sched, "a")
    _fact(sched, "b")
    _fact(sched, "a")
    assert sched.gate.changed_threads(since) == frozenset({"a", "b"})
    # Only the advances after the point asked about.
    assert sched.gate.changed_threads(since + 2) == frozenset({"a"})
    # A prearm names what its producer named too.
    sched.gate.mutate(lambda: None, threads=("c",))
    assert sched.gate.changed_threads(since + 3) == frozenset({"c"})


def test_an_advance_whose_threads_are_not_named_cannot_be_told(
    sched: Scheduler, clock: ManualClock
) -> None:
    since = sched.gate.generations
    _fact(sched, "a")
    _fact(sched, None)
    _fact(sched, "b")
    assert sched.gate.changed_threads(since) is None
    assert sched.gate.changed_threads(since + 2) == frozenset({"b"})
    # Neither a plain mutation nor progress recorded outside a naming mutate() names any.
    mark = sched.gate.generations
    sched.gate.mutate(lambda: None)
    assert sched.gate.changed_threads(mark) is None
    mark = sched.gate.generations
    sched.gate.schedule(NATIVE, clock.now_ms(), progress_cursor=1)
    assert sched.gate.changed_threads(mark) is None


def test_a_mutate_inside_a_naming_one_names_only_what_it_says(
    sched: Scheduler, storage: SqliteStorage
) -> None:
    since = sched.gate.generations

    def outer() -> None:
        sched.gate.mutate(lambda: None)  # names nothing: the outer name does not cover it

    sched.gate.mutate(outer, threads=("a",))
    assert sched.gate.changed_threads(since) is None


def test_more_advances_than_the_gate_remembers_cannot_be_told(sched: Scheduler) -> None:
    since = sched.gate.generations
    for _ in range(TOUCHED_REMEMBERED + 1):
        _fact(sched, "a")
    assert sched.gate.changed_threads(since) is None
    assert sched.gate.changed_threads(since + 1) == frozenset({"a"})
