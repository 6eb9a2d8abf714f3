"""Crash matrix, continued: failures that are not crashes, for idempotent and uncertain steps.

A journal write that fails without the object being lost, and a step value too large (over
``max_value_bytes``, over the storage's row limit, or nested too deep). In every case: the
submission settles exactly once, the Thread's next submission still runs, the emitted record
is in the history once, and an uncertain step's function runs at most once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import StorageError
from threadline.storage import SqliteStorage, migrate
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import Turn

BIG = 300_000
ROW_LIMIT = 200_000


class FaultyStorage(SqliteStorage):
    """Fails the next journal writes of one step in one state, as a transient storage fault."""

    def __init__(self, *, max_length: int | None = None) -> None:
        if max_length is None:
            super().__init__(":memory:")
        else:
            super().__init__(":memory:", max_length=max_length)
        self.fail_state: str | None = None
        self.fail_key = "step:b"
        self.failures = 0

    def exec(self, sql: str, *params: Any) -> Any:
        if (
            self.fail_state is not None
            and sql.startswith("INSERT INTO tl_journal")
            and params[1] == self.fail_key
            and params[4] == self.fail_state
        ):
            self.fail_state = None
            self.failures += 1
            raise StorageError("statement failed: database is locked (injected)")
        return super().exec(sql, *params)


def nested(depth: int) -> Any:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


#: name -> (what step b returns, RuntimeConfig overrides, storage row limit, failing state)
CASES: dict[str, tuple[Callable[[], Any], dict[str, int], int | None, str | None]] = {
    "started-write-fails": (lambda: "sent", {}, None, "started"),
    "finished-write-fails": (lambda: "sent", {}, None, "finished"),
    "value-over-max-value-bytes": (lambda: "x" * BIG, {}, None, None),
    "value-over-storage-row-limit": (lambda: "x" * BIG, {"max_value_bytes": 4 * BIG}, ROW_LIMIT,
                                     None),
    "value-nested-too-deep": (lambda: nested(10_000), {}, None, None),
}
#: Cases whose value can never be stored: the submission fails, for good, at once.
REFUSED = {"value-over-max-value-bytes", "value-over-storage-row-limit", "value-nested-too-deep"}


def build(effects: Effects, value: Callable[[], Any], effect: str,
          config: RuntimeConfig) -> Application:
    app = Application(config)

    @app.agent("flow")
    async def flow(turn: Turn) -> Any:
        a = await turn.step("a", lambda: effects.hit("a"))
        await turn.emit({"text": "progress"})

        def act() -> Any:
            effects.hit("b")
            return value() if turn.input == 1 else "plain"

        b = await turn.step("b", act, effect=effect)
        c = await turn.step("c", lambda: effects.hit("c"))
        return [a, b if isinstance(b, str) and len(b) < 100 else "long", c]

    return app


async def settle_all(h: ThreadHarness, clock: ManualClock) -> None:
    for _ in range(20):
        await h.drive()
        if all(item.state is SubmissionState.UNKNOWN for item in h.ledger.scan_nonterminal()):
            return
        clock.advance(h.app.config.alarm_backoff_cap_ms + h.app.config.lease_ms)
    raise AssertionError("the submissions did not settle")


#: Every case for both effects, but an idempotent step writes no start marker to fail.
PAIRS = [(case, effect) for case in sorted(CASES) for effect in ("idempotent", "uncertain")
         if not (case == "started-write-fails" and effect == "idempotent")]


@pytest.mark.parametrize(("case", "effect"), PAIRS)
@pytest.mark.parametrize("evict_after", [False, True])
def test_failure_without_crash(
    clock: ManualClock, effects: Effects, monkeypatch: pytest.MonkeyPatch,
    case: str, effect: str, evict_after: bool,
) -> None:
    value, overrides, row_limit, fail_state = CASES[case]
    storage = FaultyStorage(max_length=row_limit)
    migrate(storage)
    settlements = SettlementLog().install(monkeypatch)
    config = RuntimeConfig(**overrides)
    h = ThreadHarness(storage, clock, lambda: build(effects, value, effect, config))
    first = h.admit("t", 1, agent="flow")
    second = h.admit("t", 2, agent="flow")
    storage.fail_state = fail_state

    asyncio.run(h.runtime.process_thread_head("t"))
    assert storage.failures == (1 if fail_state else 0)
    after_first = h.get(first.id)
    # Whatever happened, the Attempt ended: nothing is left running for a lease to find.
    assert after_first.state is not SubmissionState.RUNNING
    if evict_after:
        # And the object may be lost right after: a rebuilt one decides nothing differently.
        h.evict()
        clock.advance(h.app.config.lease_ms)

    asyncio.run(settle_all(h, clock))
    unknown = h.get(first.id).state is SubmissionState.UNKNOWN
    assert unknown == (effect == "uncertain" and case == "finished-write-fails")
    if unknown:
        h.ledger.resolve_unknown(first.id, "accept", "operator says sent")
        asyncio.run(settle_all(h, clock))

    done = h.get(first.id)
    assert done.state is SubmissionState.SETTLED
    if case in REFUSED:
        assert done.outcome is Outcome.FAILED and done.attempts == 1
        assert done.error is not None and done.error["type"] in ("NonRetryable", "ValueTooLarge")
    else:
        assert done.outcome is Outcome.COMPLETED
    later = h.get(second.id)
    assert (later.state, later.outcome) == (SubmissionState.SETTLED, Outcome.COMPLETED)
    assert settlements.count(first.id) == settlements.count(second.id) == 1

    # Step b of the first submission: an uncertain one ran at most once in every case; an
    # idempotent one ran again only when its value was lost by a failed write.
    runs_of_first = effects.count("b") - 1  # the second submission ran b once
    if effect == "uncertain":
        assert runs_of_first == 1
    else:
        assert runs_of_first == (2 if case == "finished-write-fails" else 1)
    history = storage.exec("SELECT submission_id, kind FROM tl_history ORDER BY seq").rows
    # Each submission's record once, then its settlement's (an Unknown Outcome lets the
    # second run first, so the two may interleave).
    for sub in (first, second):
        kinds = [row["kind"] for row in history if row["submission_id"] == sub.id]
        assert kinds == ["record", "submission.settled"], sub
