"""The runtime: Attempts, the Turn API, waits, aborts, the failure policy and recovery."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from threadline.app import Application
from threadline.config import RuntimeConfig
from threadline.errors import (
    BindingUnavailable,
    Conflict,
    NonRetryable,
    StorageError,
    ValidationFailed,
)
from threadline.scheduling import NATIVE
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.recovery import Disposition, RecoveryDecision
from threadline.threads.turn import RetryPolicy, Turn

MakeHarness = Callable[..., ThreadHarness]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_one_step_submission_completes_and_publishes_once(
    make_harness: MakeHarness, settlements: SettlementLog
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("echo")
        async def echo(turn: Turn) -> Any:
            return await turn.step("echo", lambda: {"got": turn.input})

        return app

    h = make_harness(build)
    # As after a pass that found nothing to do: lanes idle, alarm cleared.
    h.storage.exec("UPDATE tl_lanes SET due_at = NULL, state = 'idle'")
    h.storage.delete_alarm()
    start = h.storage.meter.reading()
    sub = h.admit("a", 41)
    settlement = run(h.runtime.process_thread_head("a"))
    cost = h.storage.meter.reading() - start
    assert settlement is not None and settlement.outcome is Outcome.COMPLETED
    assert settlement.result == {"got": 41}
    done = h.get(sub.id)
    assert (done.state, done.outcome, done.result, done.attempts) == (
        SubmissionState.SETTLED, Outcome.COMPLETED, {"got": 41}, 1)
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1
    # Measured for the closing note: rows written from admission to settlement.
    print(f"one-step submission: rows_written={cost.rows_written} "
          f"alarm_writes={cost.alarm_writes} statements={cost.statements}")
    # 6 ledger rows (thread, submission, claim, journal, settlement, its record) plus the gate's
    # lane enrollments and generation bumps; a regression guard, not an exact figure.
    assert cost.alarm_writes == 1
    assert cost.rows_written <= 14


def test_steps_replay_from_the_journal(make_harness: MakeHarness, effects: Effects) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("plan")
        async def plan(turn: Turn) -> Any:
            first = await turn.step("first", lambda: effects.hit("first"))
            if turn.attempt == 1:
                raise RuntimeError("transient")
            second = await turn.step("second", lambda: effects.hit("second"))
            return [first, second]

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="plan")
    assert run(h.runtime.process_thread_head("a")) is None
    waiting = h.get(sub.id)
    assert waiting.state is SubmissionState.READY and waiting.not_before is not None
    assert waiting.error["type"] == "RuntimeError"
    # Backing off: nothing runs until not_before.
    assert run(h.runtime.process_thread_head("a")) is None
    h.clock.set(waiting.not_before)
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.result == [1, 1]
    assert effects.calls == {"first": 1, "second": 1}


def test_async_steps_and_repeated_names(make_harness: MakeHarness, effects: Effects) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("loop")
        async def loop(turn: Turn) -> Any:
            async def fetch() -> int:
                return effects.hit("fetch")

            return [await turn.step("fetch", fetch) for _ in range(3)]

        return app

    h = make_harness(build)
    h.admit("a", None, agent="loop")
    assert run(h.runtime.process_thread_head("a")).result == [1, 2, 3]
    keys = h.storage.exec("SELECT step_key FROM tl_journal ORDER BY position").rows
    assert [row["step_key"] for row in keys] == ["step:fetch", "step:fetch#2", "step:fetch#3"]


def test_retry_with_backoff_then_failure(make_harness: MakeHarness, effects: Effects) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flaky")
        async def flaky(turn: Turn) -> Any:
            effects.hit("attempt")
            raise ValueError(f"boom {turn.attempt}")

        return app

    h = make_harness(build, RuntimeConfig(max_attempts=3))
    sub = h.admit("a", None, agent="flaky")
    gaps = []
    for _ in range(2):
        assert run(h.runtime.process_thread_head("a")) is None
        waiting = h.get(sub.id)
        assert waiting.state is SubmissionState.READY
        gap = waiting.not_before - h.clock.now_ms()
        gaps.append(gap)
        native = h.scheduler.due_queue.get(NATIVE)
        assert native is not None and native.due_at is not None
        assert native.due_at <= waiting.not_before
        h.clock.set(waiting.not_before)
    base = h.app.config.alarm_backoff_base_ms
    assert base // 2 <= gaps[0] <= base and base <= gaps[1] <= 2 * base
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error == {"type": "ValueError", "message": "boom 3", "attempt": 3}
    assert effects.count("attempt") == 3
    assert h.get(sub.id).error["attempt"] == 3


def test_non_retryable_settles_at_once(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("strict")
        async def strict(turn: Turn) -> Any:
            await turn.step("check", lambda: None)
            raise NonRetryable("bad input")

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="strict")
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error["type"] == "NonRetryable"
    assert h.get(sub.id).attempts == 1


def test_unregistered_agent_leaves_the_submission_untouched(make_harness: MakeHarness) -> None:
    registered: list[str] = []

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)
        if "late" in registered:
            @app.agent("late", version="2")
            async def late(turn: Turn) -> Any:
                return "ran"
        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="late")
    before = h.storage.exec("SELECT * FROM tl_submissions").rows
    key_before = h.runtime.binding_registry_key
    with pytest.raises(BindingUnavailable) as caught:
        run(h.runtime.process_thread_head("a"))
    assert caught.value.agent == "late"
    assert h.storage.exec("SELECT * FROM tl_submissions").rows == before
    # A deployment that registers the agent has a new registry key and runs the submission.
    registered.append("late")
    h.evict()
    assert h.runtime.binding_registry_key != key_before
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.result == "ran"
    assert h.get(sub.id).attempts == 1


def test_approval_round_trip(make_harness: MakeHarness, effects: Effects) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("refund")
        async def refund(turn: Turn) -> Any:
            await turn.step("prepare", lambda: effects.hit("prepare"))
            decision = await turn.approval("refund", {"amount": 40})
            if not decision:
                return {"status": "declined"}
            return {"status": "ok", "note": decision.payload}

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="refund")
    follower = h.admit("a", None, agent="refund")
    assert run(h.runtime.process_thread_head("a")) is None
    waiting = h.get(sub.id)
    # Waiting is not failing: the suspension gives its attempt back to the retry budget.
    assert waiting.state is SubmissionState.SUSPENDED and waiting.attempts == 0
    request = h.storage.exec(
        "SELECT kind, body_json FROM tl_history WHERE kind = 'approval.requested'").one()
    assert '"amount":40' in request["body_json"]
    # FIFO: the follower waits behind the suspended head; nothing runs, nothing is claimed.
    assert run(h.runtime.process_thread_head("a")) is None
    assert h.get(follower.id).state is SubmissionState.QUEUED
    # The wait survives eviction.
    h.evict()
    h.ledger.decide_approval(sub.id, "refund", approved=True, payload="by alice")
    assert h.get(sub.id).state is SubmissionState.READY
    # Deciding again the same way is a no-op; differently, a conflict.
    h.ledger.decide_approval(sub.id, "refund", approved=True, payload="by alice")
    with pytest.raises(Conflict):
        h.ledger.decide_approval(sub.id, "refund", approved=False)
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.result == {"status": "ok", "note": "by alice"}
    assert effects.count("prepare") == 1
    assert h.get(sub.id).attempts == 1


def test_waits_do_not_spend_the_retry_budget(make_harness: MakeHarness) -> None:
    failures = {"left": 1}

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("careful")
        async def careful(turn: Turn) -> Any:
            for n in range(4):
                await turn.approval(f"check-{n}")
            if failures["left"]:
                failures["left"] -= 1
                raise RuntimeError("transient")
            return "done"

        return app

    h = make_harness(build, RuntimeConfig(max_attempts=2))
    sub = h.admit("a", None, agent="careful")
    for n in range(4):
        run(h.drive())
        h.ledger.decide_approval(sub.id, f"check-{n}", approved=True)
    run(h.drive())
    retrying = h.get(sub.id)
    assert (retrying.state, retrying.attempts) == (SubmissionState.READY, 1)
    h.clock.advance(RuntimeConfig().alarm_backoff_cap_ms)
    run(h.drive())
    done = h.get(sub.id)
    assert (done.state, done.outcome, done.result) == (
        SubmissionState.SETTLED, Outcome.COMPLETED, "done")


def test_declined_approval(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("refund")
        async def refund(turn: Turn) -> Any:
            return "yes" if await turn.approval("go") else "no"

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="refund")
    run(h.runtime.process_thread_head("a"))
    h.ledger.decide_approval(sub.id, "go", approved=False)
    assert run(h.runtime.process_thread_head("a")).result == "no"


def test_durable_sleep(make_harness: MakeHarness, effects: Effects) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("nap")
        async def nap(turn: Turn) -> Any:
            await turn.step("before", lambda: effects.hit("before"))
            await turn.sleep(30)
            return await turn.step("after", lambda: effects.hit("after"))

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="nap")
    start = h.clock.now_ms()
    assert run(h.runtime.process_thread_head("a")) is None
    assert h.get(sub.id).state is SubmissionState.SUSPENDED
    native = h.scheduler.due_queue.get(NATIVE)
    assert native is not None and native.due_at is not None and native.due_at <= start + 30_000
    h.evict()
    h.clock.advance(29_999)
    recovered, settled = run(h.step("a"))
    assert recovered.reports == () and settled is None
    h.clock.advance(1)
    recovered, settled = run(h.step("a"))
    assert [r.decision for r in recovered.reports] == [RecoveryDecision.APPLY_TIMER]
    assert settled is not None and settled.result == 1
    assert effects.calls == {"before": 1, "after": 1}


def test_abort_while_running_is_seen_at_the_next_step(
    make_harness: MakeHarness, settlements: SettlementLog, effects: Effects
) -> None:
    holder: dict[str, ThreadHarness] = {}

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("long")
        async def long(turn: Turn) -> Any:
            def first() -> int:
                holder["h"].ledger.request_abort(turn.submission_id, "stop")
                return effects.hit("first")

            await turn.step("first", first)
            try:
                await turn.step("second", lambda: effects.hit("second"))
            except Exception:  # an agent catching Exception cannot swallow the abort
                effects.hit("swallowed")
            return "finished"

        return app

    h = make_harness(build)
    holder["h"] = h
    sub = h.admit("a", None, agent="long")
    assert h.get(sub.id).state is SubmissionState.QUEUED
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.outcome is Outcome.ABORTED
    assert effects.calls == {"first": 1}
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1
    intent = h.ledger.read_abort_intent(sub.id)
    assert intent is not None and intent.state.value == "applied"


def test_abort_of_a_lost_attempt_is_settled_by_recovery(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("slow")
        async def slow(turn: Turn) -> Any:
            await turn.step("x", lambda: 1)
            return 1

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="slow")
    h.failpoints.evict_at("step:started")
    with pytest.raises(BaseException, match="step:started"):
        run(h.runtime.process_thread_head("a"))
    h.evict()
    h.ledger.request_abort(sub.id)
    assert h.get(sub.id).state is SubmissionState.RUNNING
    h.clock.advance(h.app.config.lease_ms)
    recovered, _ = run(h.step("a"))
    assert [(r.decision, r.disposition) for r in recovered.reports] == [
        (RecoveryDecision.SETTLE_ABORTED, Disposition.SETTLED)]
    assert h.get(sub.id).outcome is Outcome.ABORTED


def uncertain_app(effects: Effects) -> Callable[[RuntimeConfig], Application]:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("mail")
        async def mail(turn: Turn) -> Any:
            sent = await turn.step("email", lambda: effects.hit("email"), effect="uncertain")
            return {"sent": sent}

        return app

    return build


def _lose_uncertain_step(h: ThreadHarness) -> str:
    sub = h.admit("a", None, agent="mail")
    later = h.admit("a", None, agent="mail")
    h.failpoints.evict_at("step:started")
    with pytest.raises(BaseException, match="step:started"):
        run(h.runtime.process_thread_head("a"))
    h.evict()
    h.clock.advance(h.app.config.lease_ms)
    recovered, settled = run(h.step("a"))
    assert [(r.decision, r.disposition, r.step_key) for r in recovered.reports] == [
        (RecoveryDecision.UNKNOWN_OUTCOME, Disposition.UNKNOWN, "step:email")]
    assert h.get(sub.id).state is SubmissionState.UNKNOWN
    # Later input is not held hostage by the operator decision.
    assert settled is not None and settled.submission_id == later.id
    return sub.id


@pytest.mark.parametrize("action", ["retry", "accept", "abort"])
def test_unknown_outcome_resolutions(
    make_harness: MakeHarness, settlements: SettlementLog, effects: Effects, action: str
) -> None:
    h = make_harness(uncertain_app(effects))
    sub_id = _lose_uncertain_step(h)
    calls = effects.count("email")
    with pytest.raises(ValidationFailed):
        h.ledger.resolve_unknown(sub_id, "later")
    resolved = h.ledger.resolve_unknown(sub_id, action, {"accepted": True})
    with pytest.raises(Conflict):
        h.ledger.resolve_unknown(sub_id, action)
    if action == "abort":
        assert resolved.outcome is Outcome.ABORTED
        return
    assert resolved.state is SubmissionState.READY
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.outcome is Outcome.COMPLETED
    if action == "retry":
        assert effects.count("email") == calls + 1
    else:
        assert settlement.result == {"sent": {"accepted": True}}
        assert effects.count("email") == calls
    assert settlements.count(sub_id) == h.settled_records(sub_id) == 1


def test_emit_and_send_write_once(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("chat")
        async def chat(turn: Turn) -> Any:
            await turn.emit({"role": "user", "text": turn.input})
            await turn.send("other-space", "t9", {"fwd": turn.input})
            await turn.emit({"role": "assistant", "text": "hi"})
            if turn.attempt == 1:
                raise RuntimeError("retry me")
            return "ok"

        return app

    h = make_harness(build)
    sub = h.admit("a", "hello", agent="chat")
    run(h.runtime.process_thread_head("a"))
    h.clock.set(h.get(sub.id).not_before)
    assert run(h.runtime.process_thread_head("a")).result == "ok"
    history = h.storage.exec("SELECT seq, record_id, kind FROM tl_history ORDER BY seq").rows
    assert [row["seq"] for row in history] == [1, 2, 3]
    assert history[0]["record_id"] == f"{sub.id}:emit"
    assert [row["kind"] for row in history] == ["record", "record", "submission.settled"]
    messages = h.storage.exec("SELECT to_space, to_thread, state FROM tl_messages").rows
    assert messages == [{"to_space": "other-space", "to_thread": "t9", "state": "pending"}]


def test_yield_deadline_releases_the_claim_uncharged(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("long")
        async def long(turn: Turn) -> Any:
            def tick() -> int:
                h.clock.advance(1_000)
                return 1

            await turn.step("one", tick)
            await turn.step("two", tick)
            return "done"

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="long")
    deadline = h.clock.now_ms() + 500
    assert run(h.runtime.process_thread_head("a", yield_after=deadline)) is None
    paused = h.get(sub.id)
    assert paused.state is SubmissionState.READY and paused.attempts == 0
    assert run(h.runtime.process_thread_head("a", yield_after=deadline)) is None
    assert run(h.runtime.process_thread_head("a")).result == "done"


def test_blocked_recovery_is_reported_not_raised(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = make_harness(uncertain_app(Effects()))
    h.admit("a", None, agent="mail")
    h.failpoints.evict_at("step:started")
    with pytest.raises(BaseException, match="step:started"):
        run(h.runtime.process_thread_head("a"))
    h.evict()
    h.clock.advance(h.app.config.lease_ms)
    real = h.storage.exec

    def failing(sql: str, *params: Any) -> Any:
        if "FROM tl_journal" in sql:
            raise StorageError("disk I/O error")
        return real(sql, *params)

    monkeypatch.setattr(h.storage, "exec", failing)
    result = h.runtime.run_recovery("a")
    assert result.reports == ()
    assert [(b.thread_id, b.error_type) for b in result.blocked] == [("a", "StorageError")]
    assert "disk I/O error" in result.blocked[0].failure
    monkeypatch.undo()
    assert h.ledger.scan_nonterminal()[0].state is SubmissionState.RUNNING
    assert [r.decision for r in h.runtime.run_recovery("a").reports] == [
        RecoveryDecision.UNKNOWN_OUTCOME]


def test_step_retry_policy_retries_inside_the_attempt(
    make_harness: MakeHarness, effects: Effects
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("net")
        async def net(turn: Turn) -> Any:
            def call() -> int:
                if effects.hit("call") < 3:
                    raise ConnectionError("flaky")
                return 7

            return await turn.step("call", call, retry=RetryPolicy(max_attempts=3))

        return app

    h = make_harness(build)
    h.admit("a", None, agent="net")
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.result == 7
    assert effects.count("call") == 3
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def test_an_uncertain_step_that_raised_is_not_unknown(
    make_harness: MakeHarness, effects: Effects
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("pay")
        async def pay(turn: Turn) -> Any:
            def charge() -> int:
                if effects.hit("charge") == 1:
                    raise ConnectionError("refused")
                return 1

            return await turn.step("charge", charge, effect="uncertain")

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="pay")
    assert run(h.runtime.process_thread_head("a")) is None
    entry = h.storage.exec("SELECT state FROM tl_journal").one()
    assert entry["state"] == "failed"
    h.clock.set(h.get(sub.id).not_before)
    assert run(h.runtime.process_thread_head("a")).result == 1
    assert effects.count("charge") == 2


def test_catching_exception_cannot_swallow_a_suspension(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("greedy")
        async def greedy(turn: Turn) -> Any:
            try:
                await turn.approval("go")
            except Exception:
                return "swallowed"
            return "approved"

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="greedy")
    assert run(h.runtime.process_thread_head("a")) is None
    assert h.get(sub.id).state is SubmissionState.SUSPENDED
    h.ledger.decide_approval(sub.id, "go", approved=True)
    assert run(h.runtime.process_thread_head("a")).result == "approved"


def test_an_uncertain_step_lost_again_after_a_retry_is_unknown_again(
    make_harness: MakeHarness, settlements: SettlementLog, effects: Effects
) -> None:
    h = make_harness(uncertain_app(effects))
    sub_id = _lose_uncertain_step(h)
    h.ledger.resolve_unknown(sub_id, "retry")
    # The retried step is lost in flight too: a second Unknown Outcome, resolvable like the first.
    h.failpoints.evict_at("step:started")
    with pytest.raises(BaseException, match="step:started"):
        run(h.runtime.process_thread_head("a"))
    h.evict()
    h.clock.advance(h.app.config.lease_ms)
    recovered, _ = run(h.step("a"))
    assert [(r.decision, r.step_key) for r in recovered.reports] == [
        (RecoveryDecision.UNKNOWN_OUTCOME, "step:email")]
    assert h.get(sub_id).state is SubmissionState.UNKNOWN
    resolved = h.ledger.resolve_unknown(sub_id, "accept", "sent twice?")
    assert resolved.state is SubmissionState.READY
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.result == {"sent": "sent twice?"}
    assert settlements.count(sub_id) == h.settled_records(sub_id) == 1


def test_an_abort_accepted_before_the_attempt_fails_settles_aborted(
    make_harness: MakeHarness, settlements: SettlementLog, effects: Effects
) -> None:
    holder: dict[str, ThreadHarness] = {}

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("doomed")
        async def doomed(turn: Turn) -> Any:
            effects.hit("run")

            def call() -> None:
                # An abort arrives while the step is in flight; then the step fails.
                holder["h"].ledger.request_abort(turn.submission_id, "stop")
                raise ConnectionError("refused")

            return await turn.step("call", call)

        return app

    h = make_harness(build)
    holder["h"] = h
    sub = h.admit("a", None, agent="doomed")
    settlement = run(h.runtime.process_thread_head("a"))
    # Ending the Attempt is a boundary: the accepted abort wins over a retry after backoff.
    assert settlement is not None and settlement.outcome is Outcome.ABORTED
    assert h.get(sub.id).state is SubmissionState.SETTLED
    assert effects.count("run") == 1
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1


def test_an_abort_accepted_while_the_attempt_suspends_settles_aborted(
    make_harness: MakeHarness, settlements: SettlementLog,
) -> None:
    holder: dict[str, ThreadHarness] = {}

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("waits")
        async def waits_for_approval(turn: Turn) -> Any:
            try:
                return bool(await turn.approval("go"))
            finally:
                # Cleanup that awaits lets a concurrent abort in before the suspension commits.
                await asyncio.sleep(0)
                holder["h"].ledger.request_abort(turn.submission_id, "stop")

        return app

    h = make_harness(build)
    holder["h"] = h
    sub = h.admit("a", None, agent="waits")
    settlement = run(h.runtime.process_thread_head("a"))
    # Not parked as suspended behind an approval nobody will decide: aborted at once.
    assert settlement is not None and settlement.outcome is Outcome.ABORTED
    assert h.get(sub.id).state is SubmissionState.SETTLED
    assert h.storage.exec("SELECT COUNT(*) AS n FROM tl_waits WHERE state = 'open'").scalar() == 0
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1


def test_step_names_cannot_alias_a_later_occurrence(
    make_harness: MakeHarness, effects: Effects
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("alias")
        async def alias(turn: Turn) -> Any:
            first = await turn.step("fetch#2", lambda: effects.hit("explicit"))
            await turn.step("fetch", lambda: effects.hit("fetch"))
            second = await turn.step("fetch", lambda: effects.hit("fetch"))
            return [first, second]

        return app

    h = make_harness(build, RuntimeConfig(max_attempts=1))
    h.admit("a", None, agent="alias")
    settlement = run(h.runtime.process_thread_head("a"))
    # "fetch#2" would share its journal entry with the second "fetch", which would then return
    # the other step's value without running: such a name is refused.
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error["type"] == "ValidationFailed"
    assert effects.calls == {}


def test_an_uncertain_step_whose_value_is_not_json_is_not_left_in_flight(
    make_harness: MakeHarness, effects: Effects
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("odd")
        async def odd(turn: Turn) -> Any:
            # The agent decides to carry on without the value.
            with contextlib.suppress(NonRetryable):
                await turn.step("charge", lambda: {effects.hit("charge")}, effect="uncertain")
            return await turn.step("after", lambda: effects.hit("after"))

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="odd")
    h.failpoints.evict_at("step:started", after=1)
    with pytest.raises(BaseException, match="step:started"):
        run(h.runtime.process_thread_head("a"))
    # The uncertain step returned control: it is not in flight, so losing the Attempt later is
    # not an Unknown Outcome about it.
    assert h.storage.exec("SELECT state FROM tl_journal WHERE step_key = 'step:charge'"
                          ).scalar() == "failed"
    h.evict()
    h.clock.advance(h.app.config.lease_ms)
    recovered, settled = run(h.step("a"))
    assert [r.decision for r in recovered.reports] == [RecoveryDecision.RE_READY]
    assert settled is not None and settled.outcome is Outcome.COMPLETED
    assert h.get(sub.id).state is SubmissionState.SETTLED


@pytest.mark.parametrize("result", [float("nan"), {1, 2}, "\udc80", {"k": object()}])
def test_a_result_json_cannot_store_fails_the_submission_at_once(
    make_harness: MakeHarness, settlements: SettlementLog, result: Any
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("odd")
        async def odd(turn: Turn) -> Any:
            return result

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="odd")
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error["type"] == "NonRetryable"
    assert h.get(sub.id).attempts == 1
    assert settlements.count(sub.id) == h.settled_records(sub.id) == 1


def test_an_error_message_json_cannot_store_is_still_recorded(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("odd")
        async def odd(turn: Turn) -> Any:
            raise NonRetryable("bad byte \udc80")

        return app

    h = make_harness(build)
    sub = h.admit("a", None, agent="odd")
    settlement = run(h.runtime.process_thread_head("a"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error["message"] == "bad byte \\udc80"
    assert h.get(sub.id).error == settlement.error
