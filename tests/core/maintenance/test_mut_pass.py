"""Maintenance-pass details that the behaviour tests reach only on their common path."""

from __future__ import annotations

from pass_support import CONFIG, Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.errors import StorageError
from threadline.maintenance import PassPhase
from threadline.scheduling import NATIVE, NativeRetry, read_state
from threadline.scheduling import state as gen
from threadline.storage import SqliteStorage


def test_a_failed_pass_never_shortens_the_backoff_already_pending(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app)
        await obj.start()
        await obj.run()
        obj.admit("t1", "hello")
        dirty = read_state(raw_storage).dirty
        far = clock.now_ms() + 10 * CONFIG.alarm_backoff_cap_ms
        raw_storage.transaction(
            lambda: gen.set_retry(raw_storage, NativeRetry(dirty, far, True, 3)))
        # The native lane is due now for another reason (a timer, say): the pass is actionable
        # although the generation's own retry is still far ahead.
        obj.space.scheduler.gate.schedule(NATIVE, clock.now_ms())

        def broken() -> object:
            raise StorageError("disk I/O error")

        obj.space.runtime.ledger.scan_nonterminal = broken  # type: ignore[assignment,method-assign]
        report = await obj.fire()
        assert report.phase is PassPhase.FAILED
        retry = read_state(raw_storage).pending_retry
        assert retry is not None and retry.stalls == 4
        assert retry.not_before == far

    run(body())
