"""Storage refusing the end of an Attempt: its real cause is recorded, never a loss.

The rule (``threadline.threads.runtime``): once a claim is held, no storage failure escapes
``process_thread_head``. A refused end is tried once more; if storage refuses that too, nothing
is written, the claim stays running and its cause is held in memory; the next recovery sweep of
the Thread ends the claim with that cause at once, without waiting for the lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from core.threads.test_hardening_runtime import FailingStorage, harness_on, settle_all
from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import NonRetryable
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.recovery import RecoveryDecision, UnwrittenEnd
from threadline.threads.turn import Turn

Match = Callable[[str, tuple[Any, ...]], bool]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def settle_write(sql: str, params: tuple[Any, ...]) -> bool:
    return sql.startswith("UPDATE tl_submissions SET state = 'settled'")


def move_write(sql: str, params: tuple[Any, ...]) -> bool:
    return sql.startswith("UPDATE tl_submissions SET state = ?,")


def wait_insert(sql: str, params: tuple[Any, ...]) -> bool:
    return sql.startswith("INSERT INTO tl_waits")


def finished_write(sql: str, params: tuple[Any, ...]) -> bool:
    return sql.startswith("INSERT INTO tl_journal") and "finished" in params


def any_end(sql: str, params: tuple[Any, ...]) -> bool:
    return settle_write(sql, params) or move_write(sql, params) or wait_insert(sql, params)


def raising_app(effects: Effects, raise_it: Callable[[Turn], Any]) -> Callable[..., Application]:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flow")
        async def flow(turn: Turn) -> Any:
            effects.hit("body")
            return await raise_it(turn)

        return app

    return build


async def _fails_for_good(turn: Turn) -> Any:
    raise NonRetryable("the order is malformed")


async def _fails_for_now(turn: Turn) -> Any:
    if turn.attempt == 1:
        raise RuntimeError("upstream down")
    return "fine"


def setup(clock: ManualClock, effects: Effects, agent: Callable[[Turn], Any],
          config: RuntimeConfig | None = None) -> tuple[FailingStorage, ThreadHarness, str]:
    storage = FailingStorage()
    h = harness_on(storage, clock, raising_app(effects, agent), config)
    sub = h.admit("t", None, agent="flow")
    return storage, h, sub.id


def test_a_failed_settlement_refused_once_is_written_at_once_with_its_reason(
    clock: ManualClock, effects: Effects, settlements: SettlementLog
) -> None:
    storage, h, sub = setup(clock, effects, _fails_for_good)
    storage.fail(settle_write)
    settlement = run(h.runtime.process_thread_head("t"))
    assert storage.failed == 1
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error["type"] == "NonRetryable"
    assert settlement.error["message"] == "the order is malformed"
    assert settlements.count(sub) == 1 and h.runtime.recovery.held == 0


def test_a_failed_settlement_storage_refuses_outright_is_held_then_recorded(
    clock: ManualClock, effects: Effects, settlements: SettlementLog
) -> None:
    storage, h, sub = setup(clock, effects, _fails_for_good)
    storage.fail(settle_write, times=2)
    # The pass goes on: nothing escapes, nothing is written, the claim stays running.
    assert run(h.runtime.process_thread_head("t")) is None
    assert storage.failed == 2
    assert h.get(sub).state is SubmissionState.RUNNING
    assert h.runtime.recovery.held == 1
    # The next sweep ends the claim with the real cause, before the lease expires.
    recovered, _ = run(h.step("t"))
    assert [r.decision for r in recovered.reports] == [RecoveryDecision.SETTLE_FAILED]
    done = h.get(sub)
    assert done.outcome is Outcome.FAILED
    assert done.error is not None
    assert (done.error["type"], done.error["message"]) == ("NonRetryable",
                                                           "the order is malformed")
    assert done.error["unrecorded"]["type"] == "StorageError"
    assert effects.count("body") == 1 and settlements.count(sub) == 1
    assert h.runtime.recovery.held == 0


def test_a_retryable_failure_on_the_last_attempt_is_held_and_settles_failed(
    clock: ManualClock, effects: Effects
) -> None:
    async def always(turn: Turn) -> Any:
        raise RuntimeError("upstream down")

    storage, h, sub = setup(clock, effects, always, RuntimeConfig(max_attempts=1))
    storage.fail(settle_write, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    run(h.step("t"))
    done = h.get(sub)
    assert done.outcome is Outcome.FAILED and done.error is not None
    assert (done.error["type"], done.error["message"]) == ("RuntimeError", "upstream down")


def test_an_aborted_settlement_storage_refuses_outright_keeps_the_abort_reason(
    clock: ManualClock, effects: Effects, settlements: SettlementLog
) -> None:
    holder: dict[str, ThreadHarness] = {}

    async def aborted(turn: Turn) -> Any:
        holder["h"].ledger.request_abort(turn.submission_id, "user cancelled")
        return await turn.step("next", lambda: effects.hit("next"))

    storage, h, sub = setup(clock, effects, aborted)
    holder["h"] = h
    storage.fail(settle_write, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    assert h.get(sub).state is SubmissionState.RUNNING
    run(h.step("t"))
    done = h.get(sub)
    assert done.outcome is Outcome.ABORTED
    assert done.error == {"type": "Aborted", "message": "user cancelled"}
    assert effects.count("next") == 0 and settlements.count(sub) == 1


def test_a_release_for_retry_refused_once_is_written_at_once(
    clock: ManualClock, effects: Effects
) -> None:
    storage, h, sub = setup(clock, effects, _fails_for_now)
    storage.fail(move_write)
    assert run(h.runtime.process_thread_head("t")) is None
    released = h.get(sub)
    assert released.state is SubmissionState.READY and released.error is not None
    assert released.error["type"] == "RuntimeError"
    assert h.runtime.recovery.held == 0


def test_a_release_for_retry_storage_refuses_outright_keeps_the_cause(
    clock: ManualClock, effects: Effects, settlements: SettlementLog
) -> None:
    storage, h, sub = setup(clock, effects, _fails_for_now)
    storage.fail(move_write, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    assert h.get(sub).state is SubmissionState.RUNNING
    recovered, _ = run(h.step("t"))
    assert [r.decision for r in recovered.reports] == [RecoveryDecision.RE_READY]
    ready = h.get(sub)
    assert ready.state is SubmissionState.READY and ready.error is not None
    assert (ready.error["type"], ready.error["message"]) == ("RuntimeError", "upstream down")
    assert ready.attempts == 1
    run(settle_all(h, clock))
    assert h.get(sub).result == "fine"
    assert effects.count("body") == 2 and settlements.count(sub) == 1


def test_a_suspension_storage_refuses_fails_the_attempt_with_the_refusal_at_once(
    clock: ManualClock, effects: Effects
) -> None:
    async def waits(turn: Turn) -> Any:
        await turn.approval("go", {"x": 1})
        return "approved"

    storage, h, sub = setup(clock, effects, waits)
    storage.fail(wait_insert, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    released = h.get(sub)
    assert released.state is SubmissionState.READY and released.error is not None
    assert released.error["type"] == "StorageError"
    # It asks again on its next Attempt, and this time the wait is written.
    run(settle_all(h, clock))
    assert h.get(sub).state is SubmissionState.SUSPENDED


def test_a_suspension_whose_every_end_is_refused_is_held_with_the_refusal(
    clock: ManualClock, effects: Effects
) -> None:
    async def sleeps(turn: Turn) -> Any:
        await turn.sleep(10)
        return "woke"

    storage, h, sub = setup(clock, effects, sleeps)
    storage.fail(any_end, times=4)  # suspend twice, then the release twice
    assert run(h.runtime.process_thread_head("t")) is None
    assert storage.failed == 4 and h.get(sub).state is SubmissionState.RUNNING
    run(h.step("t"))
    ready = h.get(sub)
    assert ready.state is SubmissionState.READY and ready.error is not None
    assert ready.error["type"] == "StorageError"


def test_an_unknown_outcome_storage_refuses_is_parked_by_recovery_with_its_cause(
    clock: ManualClock, effects: Effects
) -> None:
    async def uncertain(turn: Turn) -> Any:
        return await turn.step("charge", lambda: effects.hit("charge"), effect="uncertain")

    storage, h, sub = setup(clock, effects, uncertain)
    storage.fail(finished_write)
    storage.fail(wait_insert, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    assert h.get(sub).state is SubmissionState.RUNNING
    recovered, _ = run(h.step("t"))
    assert [r.decision for r in recovered.reports] == [RecoveryDecision.UNKNOWN_OUTCOME]
    parked = h.get(sub)
    assert parked.state is SubmissionState.UNKNOWN and parked.error is not None
    assert parked.error["type"] == "StorageError"
    run(settle_all(h, clock))
    assert effects.count("charge") == 1


def test_a_held_end_survives_a_recovery_that_storage_refuses_too(
    clock: ManualClock, effects: Effects
) -> None:
    storage, h, sub = setup(clock, effects, _fails_for_good)
    storage.fail(settle_write, times=3)
    assert run(h.runtime.process_thread_head("t")) is None
    blocked = h.runtime.run_recovery("t")
    assert [b.error_type for b in blocked.blocked] == ["StorageError"]
    assert h.runtime.recovery.held == 1 and h.get(sub).state is SubmissionState.RUNNING
    run(h.step("t"))
    done = h.get(sub)
    assert done.outcome is Outcome.FAILED and done.error is not None
    assert done.error["type"] == "NonRetryable"


def test_what_is_held_is_lost_with_the_object_and_the_reset_is_recorded(
    clock: ManualClock, effects: Effects
) -> None:
    """Held in memory only: after an eviction the claim is found stamped by another
    incarnation and recovered at once as lost to a reset, its real cause gone with the
    object."""
    storage, h, sub = setup(clock, effects, _fails_for_good)
    storage.fail(settle_write, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    h.evict()
    assert h.runtime.recovery.held == 0
    assert [r.decision for r in h.runtime.run_recovery("t").reports] == [
        RecoveryDecision.RE_READY]  # at once: the lease has not expired
    assert h.get(sub).state is SubmissionState.READY
    error = h.get(sub).error
    assert (error["type"], error["cause"]) == ("AttemptLost", "reset")


def test_a_held_end_never_applies_to_another_claim(
    clock: ManualClock, effects: Effects
) -> None:
    storage, h, sub = setup(clock, effects, _fails_for_good)
    storage.fail(settle_write, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    held_revision = h.get(sub).revision
    # Pretend the end held is that of an older claim: it must not end this one.
    h.runtime.recovery.hold(sub, UnwrittenEnd(revision=held_revision - 1,
                                              error={"type": "Stale"}, final=True))
    # The claim is still lost (this incarnation no longer runs it), but as a lost Attempt:
    # the held end's final error would have settled it failed.
    assert [r.decision for r in h.runtime.run_recovery("t").reports] == [
        RecoveryDecision.RE_READY]
    assert h.runtime.recovery.held == 0
    assert h.get(sub).state is SubmissionState.READY
    # Stamped by this incarnation, which no longer runs it: stopped here, not reset.
    error = h.get(sub).error
    assert (error["type"], error["cause"]) == ("AttemptLost", "interrupted")


def test_a_held_failure_after_a_reset_is_charged_without_the_lost_attempt(
    clock: ManualClock, effects: Effects
) -> None:
    """Recovery ending a claim with a held failure charges ``attempts - losses`` against
    ``max_attempts``, as the runtime does: an Attempt lost to a reset before it spends
    nothing, so with ``max_attempts=2`` the failure is retried and the next Attempt settles."""

    async def fails_once_after_a_reset(turn: Turn) -> Any:
        if turn.attempt <= 2:
            raise RuntimeError(f"upstream down in attempt {turn.attempt}")
        return "fine"

    storage, h, sub = setup(clock, effects, fails_once_after_a_reset,
                            RuntimeConfig(max_attempts=2))
    # Attempt 1: its failure is held, then lost with the object: a reset, not a failure.
    storage.fail(move_write, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    h.evict()
    assert [r.decision for r in h.runtime.run_recovery("t").reports] == [
        RecoveryDecision.RE_READY]
    lost = h.get(sub)
    assert (lost.attempts, lost.losses) == (1, 1)
    # Attempt 2 fails for real, and storage refuses to record that too: held again.
    storage.fail(move_write, times=2)
    assert run(h.runtime.process_thread_head("t")) is None
    assert h.runtime.recovery.held == 1
    # One failure charged of two: retried after its backoff, not settled failed.
    assert [r.decision for r in h.runtime.run_recovery("t").reports] == [
        RecoveryDecision.RE_READY]
    retried = h.get(sub)
    assert retried.state is SubmissionState.READY and retried.error is not None
    assert retried.error["message"] == "upstream down in attempt 2"
    run(settle_all(h, clock))
    done = h.get(sub)
    assert (done.outcome, done.result, done.attempts, done.losses) == (
        Outcome.COMPLETED, "fine", 3, 1)


def test_a_yield_storage_refuses_outright_is_held_with_the_refusal(
    clock: ManualClock, effects: Effects
) -> None:
    async def long(turn: Turn) -> Any:
        await turn.step("one", lambda: clock.advance(10_000))  # the pass's deadline passes
        return await turn.step("two", lambda: effects.hit("two"))

    storage, h, sub = setup(clock, effects, long)
    storage.fail(move_write, times=2)
    deadline = clock.now_ms() + 5_000
    assert run(h.runtime.process_thread_head("t", yield_after=deadline)) is None
    assert h.get(sub).state is SubmissionState.RUNNING and h.runtime.recovery.held == 1
    h.runtime.run_recovery("t")
    ready = h.get(sub)
    assert ready.state is SubmissionState.READY and ready.error is not None
    assert ready.error["type"] == "StorageError" and ready.error["unrecorded"]["type"] == (
        "StorageError")
    run(settle_all(h, clock))
    assert h.get(sub).outcome is Outcome.COMPLETED and effects.count("two") == 1
