"""The faults and binding waits are written only by the object's own incarnation: a pass reads
them once, later passes reuse what it read until the incarnation writes one, and a new
incarnation reads them again."""

from __future__ import annotations

from typing import Any

from pass_support import Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.storage import SqliteStorage

_FAULTS = "SELECT thread_id, retry_at FROM tl_recovery_faults"
_PARKED = "SELECT submission_id FROM tl_binding_waits"


def _spy(storage: SqliteStorage, seen: list[str]) -> None:
    real = storage.exec

    def exec_(sql: str, *params: Any) -> Any:
        if sql in (_FAULTS, _PARKED):
            seen.append(sql)
        return real(sql, *params)

    storage.exec = exec_  # type: ignore[method-assign]


def test_later_passes_reuse_what_the_first_read(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        seen: list[str] = []
        _spy(raw_storage, seen)
        for n in range(3):
            obj.admit(f"t{n}", {"n": n})
            await obj.run()
        assert sorted(seen) == [_PARKED, _FAULTS]
        seen.clear()
        await obj.evict()  # a new incarnation knows nothing
        obj.admit("t9", {"n": 9})
        await obj.run()
        assert sorted(seen) == [_PARKED, _FAULTS]

    run(body())


def test_a_parked_head_is_read_again_after_the_incarnation_parks_it(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        obj.admit("warm", {})
        await obj.run()
        seen: list[str] = []
        _spy(raw_storage, seen)
        obj.admit("t", {}, agent="gone")  # no such agent in this deployment: parked
        await obj.run()
        assert [w[1] for w in obj.space.bindings.waits()] == [obj.space.runtime.head("t")
                                                             .submission_id]
        seen.clear()
        obj.admit("t", {"n": 2})  # queued behind the parked head: nothing may run
        await obj.run()
        assert _PARKED in seen  # the park invalidated what the first pass read
        assert obj.space.bindings.parked_submissions() == frozenset(
            w[1] for w in obj.space.bindings.waits())

    run(body())
