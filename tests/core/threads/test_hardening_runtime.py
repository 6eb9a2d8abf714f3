"""Hardening of the runtime against inputs and failures that are not crashes.

Each test pins one rule of the runtime on SqliteStorage under CPython: an uncertain step never
runs twice, no value can wedge a Thread, every misuse fails the Attempt cleanly with its cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.errors import Conflict, Evicted, NonRetryable, StorageError, ValidationFailed
from threadline.storage import SqliteStorage, migrate
from threadline.testing import Effects, SettlementLog, ThreadHarness
from threadline.threads.model import Outcome, SubmissionState
from threadline.threads.turn import RetryPolicy, Turn

MakeHarness = Callable[..., ThreadHarness]
Build = Callable[[RuntimeConfig], Application]

#: Above the default max_value_bytes, so only a raised limit lets it reach storage.
BIG = 300_000
#: The row limit the storage of some tests imitates (the platform's is 2 MB).
ROW_LIMIT = 200_000


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def nested(depth: int) -> Any:
    """A list nested ``depth`` levels deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def journal_states(storage: SqliteStorage, submission_id: str) -> dict[str, str]:
    rows = storage.exec("SELECT step_key, state FROM tl_journal WHERE submission_id = ?",
                        submission_id)
    return {row["step_key"]: row["state"] for row in rows}


class FailingStorage(SqliteStorage):
    """SqliteStorage whose next statements matching a predicate fail, as a transient fault."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.rules: list[tuple[Callable[[str, tuple[Any, ...]], bool], int]] = []
        self.failed = 0

    def fail(self, match: Callable[[str, tuple[Any, ...]], bool], times: int = 1) -> None:
        self.rules.append((match, times))

    def exec(self, sql: str, *params: Any) -> Any:
        for index, (match, times) in enumerate(self.rules):
            if times > 0 and match(sql, params):
                self.rules[index] = (match, times - 1)
                self.failed += 1
                raise StorageError("statement failed: disk I/O error (injected)")
        return super().exec(sql, *params)


def finished_write(sql: str, params: tuple[Any, ...]) -> bool:
    return sql.startswith("INSERT INTO tl_journal") and "finished" in params


def settle_write(sql: str, params: tuple[Any, ...]) -> bool:
    return sql.startswith("UPDATE tl_submissions SET state = 'settled'")


def harness_on(storage: SqliteStorage, clock: ManualClock, build: Build,
               config: RuntimeConfig | None = None) -> ThreadHarness:
    migrate(storage)
    chosen = config if config is not None else RuntimeConfig()
    return ThreadHarness(storage, clock, lambda: build(chosen))


def one_step_app(effects: Effects, *, effect: str, value: Callable[[], Any],
                 then: Callable[[Turn], Any] | None = None) -> Build:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flow")
        async def flow(turn: Turn) -> Any:
            def act() -> Any:
                effects.hit("act")
                return value()

            got = await turn.step("act", act, effect=effect)
            if then is not None:
                await then(turn)
            return {"len": len(json.dumps(got))}

        return app

    return build


async def settle_all(h: ThreadHarness, clock: ManualClock, *, rounds: int = 20) -> None:
    """Run the Threads, moving time past every backoff, until nothing is runnable."""
    for _ in range(rounds):
        await h.drive()
        open_items = h.ledger.scan_nonterminal()
        if all(item.state in (SubmissionState.UNKNOWN, SubmissionState.SUSPENDED)
               for item in open_items):
            return
        clock.advance(h.app.config.alarm_backoff_cap_ms + h.app.config.lease_ms)
    raise AssertionError("the submissions did not settle")


# -- 1. an uncertain step never runs twice ------------------------------------------------------


def test_1_uncertain_step_whose_finished_write_fails_becomes_unknown_not_rerun(
    clock: ManualClock, effects: Effects
) -> None:
    storage = FailingStorage()
    h = harness_on(storage, clock, one_step_app(effects, effect="uncertain", value=lambda: "ok"))
    sub = h.admit("t", None, agent="flow")
    storage.fail(finished_write)
    assert run(h.runtime.process_thread_head("t")) is None
    assert storage.failed == 1
    stuck = h.get(sub.id)
    # Not back to ready: its step may have acted, only an operator may say what it did.
    assert stuck.state is SubmissionState.UNKNOWN
    assert stuck.error is not None and stuck.error["type"] == "StorageError"
    assert journal_states(storage, sub.id) == {"step:act": "started"}
    run(settle_all(h, clock))
    assert effects.count("act") == 1
    h.ledger.resolve_unknown(sub.id, "accept", "ok")
    run(settle_all(h, clock))
    done = h.get(sub.id)
    assert (done.outcome, done.result) == (Outcome.COMPLETED, {"len": 4})
    assert effects.count("act") == 1


def test_1_idempotent_step_whose_finished_write_fails_runs_again(
    clock: ManualClock, effects: Effects
) -> None:
    storage = FailingStorage()
    h = harness_on(storage, clock, one_step_app(effects, effect="idempotent", value=lambda: "ok"))
    sub = h.admit("t", None, agent="flow")
    storage.fail(finished_write)
    run(settle_all(h, clock))
    assert h.get(sub.id).outcome is Outcome.COMPLETED
    assert effects.count("act") == 2


@pytest.mark.parametrize("effect", ["uncertain", "idempotent"])
def test_1_step_value_over_the_storage_row_limit_runs_once_and_fails(
    clock: ManualClock, effects: Effects, effect: str
) -> None:
    storage = SqliteStorage(":memory:", max_length=ROW_LIMIT)
    config = RuntimeConfig(max_value_bytes=4 * BIG)  # our own limit above the row limit
    h = harness_on(storage, clock, one_step_app(effects, effect=effect, value=lambda: "x" * BIG),
                   config)
    sub = h.admit("t", None, agent="flow")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert "too large" in settlement.error["message"]
    run(settle_all(h, clock))
    assert effects.count("act") == 1
    if effect == "uncertain":
        assert journal_states(storage, sub.id) == {"step:act": "failed"}


@pytest.mark.parametrize("effect", ["uncertain", "idempotent"])
def test_1_step_value_nested_too_deep_runs_once_and_fails(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock, effect: str
) -> None:
    h = make_harness(one_step_app(effects, effect=effect, value=lambda: nested(10_000)))
    sub = h.admit("t", None, agent="flow")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert "max_json_depth (64)" in settlement.error["message"]
    run(settle_all(h, clock))
    assert effects.count("act") == 1
    assert h.get(sub.id).attempts == 1


def test_1_any_open_end_with_an_uncertain_step_in_flight_is_unknown(
    clock: ManualClock, effects: Effects
) -> None:
    """The agent swallows the failed journal write and waits: still never a second run."""

    async def swallow_then_sleep(turn: Turn) -> None:
        await turn.sleep(1)

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flow")
        async def flow(turn: Turn) -> Any:
            with contextlib.suppress(StorageError):
                await turn.step("act", lambda: effects.hit("act"), effect="uncertain")
            await swallow_then_sleep(turn)
            return "done"

        return app

    storage = FailingStorage()
    h = harness_on(storage, clock, build)
    sub = h.admit("t", None, agent="flow")
    storage.fail(finished_write)
    run(h.runtime.process_thread_head("t"))
    assert h.get(sub.id).state is SubmissionState.UNKNOWN
    clock.advance(5_000)
    run(settle_all(h, clock))
    assert effects.count("act") == 1


# -- 2. JSON nesting limit -----------------------------------------------------------------------


@pytest.mark.parametrize("depth", [65, 950, 10_000])
def test_2_deep_input_is_refused_at_admission_naming_the_limit(
    make_harness: MakeHarness, effects: Effects, depth: int
) -> None:
    h = make_harness(one_step_app(effects, effect="idempotent", value=lambda: 1))
    with pytest.raises(ValidationFailed, match=r"max_json_depth \(64\)"):
        h.admit("t", nested(depth), agent="flow")
    assert h.ledger.scan_nonterminal() == []


def test_2_input_at_the_limit_is_admitted_and_runs(
    make_harness: MakeHarness, effects: Effects
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("echo")
        async def echo(turn: Turn) -> Any:
            return await turn.step("echo", lambda: turn.input)

        return app

    h = make_harness(build)
    sub = h.admit("t", nested(64))
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.COMPLETED
    assert h.get(sub.id).result == nested(64)


def test_2_a_stored_input_too_deep_to_read_fails_instead_of_wedging_its_thread(
    make_harness: MakeHarness, effects: Effects
) -> None:
    h = make_harness(one_step_app(effects, effect="idempotent", value=lambda: 1))
    stuck = h.admit("t", None, agent="flow")
    after = h.admit("t", None, agent="flow")
    # A row written before the limit existed: nested far beyond what any Attempt can decode.
    h.storage.exec("UPDATE tl_submissions SET input_json = ? WHERE id = ?",
                   "[" * 5_000 + "]" * 5_000, stuck.id)
    first = run(h.runtime.process_thread_head("t"))
    assert first is not None and first.submission_id == stuck.id
    assert first.outcome is Outcome.FAILED and "max_json_depth" in first.error["message"]
    second = run(h.runtime.process_thread_head("t"))
    assert second is not None and second.submission_id == after.id
    assert second.outcome is Outcome.COMPLETED


# -- 3. settlement failures ----------------------------------------------------------------------


def result_app(effects: Effects, result: Callable[[], Any]) -> Build:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flow")
        async def flow(turn: Turn) -> Any:
            effects.hit("body")
            return result()

        return app

    return build


def test_3_result_the_storage_refuses_fails_at_once_with_its_reason(
    clock: ManualClock, effects: Effects, settlements: SettlementLog
) -> None:
    storage = SqliteStorage(":memory:", max_length=ROW_LIMIT)
    h = harness_on(storage, clock, result_app(effects, lambda: "x" * BIG),
                   RuntimeConfig(max_value_bytes=4 * BIG))
    sub = h.admit("t", None, agent="flow")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert "too big" in settlement.error["message"]
    assert settlement.error["type"] == "NonRetryable"
    done = h.get(sub.id)
    assert (done.state, done.attempts) == (SubmissionState.SETTLED, 1)
    assert effects.count("body") == 1 and settlements.count(sub.id) == 1


def test_3_result_nested_too_deep_fails_at_once(
    make_harness: MakeHarness, effects: Effects
) -> None:
    h = make_harness(result_app(effects, lambda: nested(10_000)))
    h.admit("t", None, agent="flow")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert "max_json_depth" in settlement.error["message"]
    assert effects.count("body") == 1


def test_3_a_transient_settlement_failure_fails_the_attempt_now_not_by_lease_expiry(
    clock: ManualClock, effects: Effects, settlements: SettlementLog
) -> None:
    storage = FailingStorage()
    h = harness_on(storage, clock, result_app(effects, lambda: "fine"))
    sub = h.admit("t", None, agent="flow")
    storage.fail(settle_write)
    assert run(h.runtime.process_thread_head("t")) is None
    retried = h.get(sub.id)
    assert retried.state is SubmissionState.READY
    assert retried.error is not None and retried.error["type"] == "StorageError"
    run(settle_all(h, clock))
    assert h.get(sub.id).outcome is Outcome.COMPLETED
    assert effects.count("body") == 2 and settlements.count(sub.id) == 1


# -- 4. max_value_bytes --------------------------------------------------------------------------


async def _emit_big(turn: Turn) -> Any:
    return await turn.emit({"text": "x" * BIG})


async def _approval_big(turn: Turn) -> Any:
    return await turn.approval("publish", "x" * BIG)


async def _send_big(turn: Turn) -> Any:
    return await turn.send("space", "other", "x" * BIG)


async def _step_big(turn: Turn) -> Any:
    return await turn.step("big", lambda: "x" * BIG)


async def _result_big(turn: Turn) -> Any:
    return "x" * BIG


@pytest.mark.parametrize(
    ("agent", "kind"),
    [
        (_step_big, "step 'big' value"),
        (_result_big, "result"),
        (_emit_big, "record"),
        (_approval_big, "approval payload"),
        (_send_big, "message input"),
    ],
)
def test_4_each_kind_of_value_over_max_value_bytes_fails_naming_limit_and_kind(
    make_harness: MakeHarness, agent: Callable[[Turn], Any], kind: str
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)
        app.agent("flow")(agent)
        return app

    h = make_harness(build)
    sub = h.admit("t", None, agent="flow")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert kind in settlement.error["message"]
    assert "max_value_bytes (262144)" in settlement.error["message"]
    assert h.get(sub.id).attempts == 1
    for table in ("tl_messages", "tl_waits", "tl_journal"):
        assert h.storage.exec(f"SELECT COUNT(*) AS n FROM {table}").scalar() == 0, table
    # Nothing of the refused value reached the log: only the settlement's own record.
    kinds = [row["kind"] for row in h.storage.exec("SELECT kind FROM tl_history")]
    assert kinds == ["submission.settled"]


def test_4_operator_values_are_bounded_too(make_harness: MakeHarness, effects: Effects) -> None:
    h = make_harness(one_step_app(effects, effect="idempotent", value=lambda: 1))
    sub = h.admit("t", None, agent="flow")
    with pytest.raises(ValidationFailed, match="reason"):
        h.ledger.request_abort(sub.id, "x" * BIG)
    assert h.get(sub.id).state is SubmissionState.QUEUED


# -- 5. turn.sleep -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "duration", [math.inf, -math.inf, math.nan, 1e300, 10**20, -1, True, "5", None]
)
def test_5_sleep_refuses_what_is_not_a_bounded_finite_duration(
    make_harness: MakeHarness, duration: Any
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("sleepy")
        async def sleepy(turn: Turn) -> Any:
            await turn.sleep(duration)
            return "woke"

        return app

    h = make_harness(build)
    sub = h.admit("t", None, agent="sleepy")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error["type"] == "ValidationFailed"
    assert h.get(sub.id).attempts == 1


def test_5_sleep_takes_a_timedelta(make_harness: MakeHarness, clock: ManualClock) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("sleepy")
        async def sleepy(turn: Turn) -> Any:
            await turn.sleep(timedelta(seconds=5))
            return "woke"

        return app

    h = make_harness(build)
    sub = h.admit("t", None, agent="sleepy")
    start = clock.now_ms()
    assert run(h.runtime.process_thread_head("t")) is None
    wake = h.storage.exec("SELECT wake_at FROM tl_waits WHERE submission_id = ?", sub.id).scalar()
    assert wake == start + 5_000
    clock.advance(5_000)
    run(h.drive())
    assert h.get(sub.id).result == "woke"


# -- 6. in-step retries --------------------------------------------------------------------------


def retrying_app(
    effects: Effects, holder: dict[str, ThreadHarness], *, abort_in_call: bool
) -> Build:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flaky")
        async def flaky(turn: Turn) -> Any:
            def call() -> Any:
                if effects.hit("call") == 1 and abort_in_call:
                    holder["h"].ledger.request_abort(turn.submission_id, "user cancelled")
                raise RuntimeError("upstream down")

            policy = RetryPolicy(max_attempts=5, initial_delay_ms=60_000)
            return await turn.step("call", call, retry=policy)

        return app

    return build


async def _paused_run(
    h: ThreadHarness, clock: ManualClock, during_pause: Callable[[], None]
) -> Any:
    task = asyncio.ensure_future(h.runtime.process_thread_head("t"))
    for _ in range(20):
        await asyncio.sleep(0)
    during_pause()
    for _ in range(50):
        await asyncio.sleep(0)
    try:
        assert task.done(), "the step is still pausing for a retry"
        return task.result()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_6_no_retry_pause_starts_once_an_abort_is_accepted(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    holder: dict[str, ThreadHarness] = {}
    h = make_harness(retrying_app(effects, holder, abort_in_call=True))
    holder["h"] = h
    sub = h.admit("t", None, agent="flaky")
    # The clock does not move: a pause of 60 s would never end.
    settlement = run(_paused_run(h, clock, lambda: None))
    assert effects.count("call") == 1
    assert settlement is not None and settlement.outcome is Outcome.ABORTED
    assert h.get(sub.id).error == {"type": "Aborted", "message": "user cancelled"}


def test_6_an_abort_accepted_during_a_retry_pause_stops_the_retries(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    h = make_harness(retrying_app(effects, {}, abort_in_call=False))
    sub = h.admit("t", None, agent="flaky")

    def abort_then_wake() -> None:
        assert effects.count("call") == 1
        h.ledger.request_abort(sub.id, "user cancelled")
        clock.advance(60_000)

    settlement = run(_paused_run(h, clock, abort_then_wake))
    assert effects.count("call") == 1
    assert settlement is not None and settlement.outcome is Outcome.ABORTED


def test_6_retry_pauses_count_against_the_attempt_time(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flaky")
        async def flaky(turn: Turn) -> Any:
            def call() -> Any:
                effects.hit("call")
                raise RuntimeError("upstream down")

            policy = RetryPolicy(max_attempts=5, initial_delay_ms=200_000, backoff=2.0,
                                 max_delay_ms=3_600_000)
            return await turn.step("call", call, retry=policy)

        return app

    h = make_harness(build)  # attempt_timeout_ms: 300 s by default
    sub = h.admit("t", None, agent="flaky")

    async def scenario() -> None:
        task = asyncio.ensure_future(h.runtime.process_thread_head("t"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert effects.count("call") == 1  # now pausing 200 s, inside the 300 s bound
        clock.advance(200_000)
        for _ in range(50):
            await asyncio.sleep(0)
        # The next pause (400 s) would end past the bound: the step fails now instead.
        try:
            assert task.done()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    run(scenario())
    assert effects.count("call") == 2
    failed = h.get(sub.id)
    assert failed.state is SubmissionState.READY
    assert failed.error is not None and failed.error["type"] == "RuntimeError"


# -- 7. attempt_timeout_ms -----------------------------------------------------------------------


def hanging_app(effects: Effects, effect: str) -> Build:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("hang")
        async def hang(turn: Turn) -> Any:
            async def wait() -> str:
                if effects.hit("wait") == 1:
                    await asyncio.Event().wait()  # never set: a hung call
                return "answered"

            return await turn.step("wait", wait, effect=effect)

        return app

    return build


async def _run_until_bound(h: ThreadHarness, clock: ManualClock, bound_ms: int) -> Any:
    task = asyncio.ensure_future(h.runtime.process_thread_head("t"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()
    clock.advance(bound_ms)
    for _ in range(50):
        await asyncio.sleep(0)
    try:
        assert task.done(), "the Attempt outlived its bound"
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def test_7_a_hung_idempotent_step_is_cancelled_and_runs_again_later(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    h = make_harness(hanging_app(effects, "idempotent"))
    sub = h.admit("t", None, agent="hang")
    assert run(_run_until_bound(h, clock, 300_000)) is None  # the default bound
    timed_out = h.get(sub.id)
    assert timed_out.state is SubmissionState.READY and timed_out.attempts == 1
    assert timed_out.error is not None and timed_out.error["type"] == "AttemptTimeout"
    run(settle_all(h, clock))
    assert h.get(sub.id).result == "answered"
    assert effects.count("wait") == 2


def test_7_a_hung_uncertain_step_becomes_an_unknown_outcome(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    h = make_harness(hanging_app(effects, "uncertain"), RuntimeConfig(attempt_timeout_ms=60_000))
    sub = h.admit("t", None, agent="hang")
    assert run(_run_until_bound(h, clock, 60_000)) is None
    assert h.get(sub.id).state is SubmissionState.UNKNOWN
    run(settle_all(h, clock))
    assert effects.count("wait") == 1


def test_7_a_cancellation_from_outside_propagates_and_writes_nothing(
    make_harness: MakeHarness, effects: Effects
) -> None:
    h = make_harness(hanging_app(effects, "uncertain"))
    sub = h.admit("t", None, agent="hang")

    async def scenario() -> None:
        task = asyncio.ensure_future(h.runtime.process_thread_head("t"))
        for _ in range(20):
            await asyncio.sleep(0)
        before = h.get(sub.id)
        writes = h.storage.meter.reading().rows_written
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert h.storage.meter.reading().rows_written == writes
        assert h.get(sub.id) == before and before.state is SubmissionState.RUNNING

    run(scenario())


def test_7_attempt_timeout_must_stay_below_the_event_deadline() -> None:
    with pytest.raises(ValueError, match="attempt_timeout_ms must be < event_deadline_ms"):
        RuntimeConfig(attempt_timeout_ms=840_000)
    assert RuntimeConfig().attempt_timeout_ms == 300_000


# -- 8. foreign BaseExceptions -------------------------------------------------------------------


class Custom(BaseException):
    """Not an Exception, not one of the runtime's signals."""


@pytest.mark.parametrize("raised", [Custom("custom stop"), GeneratorExit("closed")])
def test_8_a_foreign_base_exception_fails_the_attempt_with_its_type(
    make_harness: MakeHarness, raised: BaseException
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("odd")
        async def odd(turn: Turn) -> Any:
            raise raised

        return app

    h = make_harness(build, RuntimeConfig(max_attempts=2))
    sub = h.admit("t", None, agent="odd")
    assert run(h.runtime.process_thread_head("t")) is None
    first = h.get(sub.id)
    assert first.state is SubmissionState.READY
    assert first.error is not None and first.error["type"] == type(raised).__name__
    assert first.error["message"] == str(raised)


# -- 9. RetryPolicy ------------------------------------------------------------------------------


def test_9_retry_delay_is_clamped_before_it_can_overflow() -> None:
    policy = RetryPolicy(max_attempts=100, initial_delay_ms=1, backoff=1_000.0,
                         max_delay_ms=60_000)
    assert policy.delay_ms(1) == 1
    assert policy.delay_ms(2) == 1_000
    assert policy.delay_ms(3) == 60_000
    assert policy.delay_ms(400) == 60_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backoff": math.nan},
        {"backoff": math.inf},
        {"backoff": 1e200},
        {"max_attempts": True},
        {"max_attempts": 1.5},
        {"max_attempts": 10**9},
        {"initial_delay_ms": math.inf},
        {"max_delay_ms": -1},
        {"non_retryable": (int,)},
    ],
)
def test_9_a_policy_is_validated_when_built(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize("name", ["bad name", "", "x" * 129, "a#2", "..", "."])
def test_9_an_invalid_step_name_fails_for_good_at_once(
    make_harness: MakeHarness, effects: Effects, name: str
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("bad")
        async def bad(turn: Turn) -> Any:
            return await turn.step(name, lambda: effects.hit("fn"))

        return app

    h = make_harness(build)  # max_attempts 5: a retry would show as a ready submission
    sub = h.admit("t", None, agent="bad")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error["type"] == "ValidationFailed"
    assert h.get(sub.id).attempts == 1 and effects.calls == {}


# -- 10. smaller ones ----------------------------------------------------------------------------


@pytest.mark.parametrize("reason", [{"why": "x"}, ["x"], 5, "x" * 1_001, "\ud800"])
def test_10_an_abort_reason_must_be_bounded_text(
    make_harness: MakeHarness, effects: Effects, reason: Any
) -> None:
    h = make_harness(one_step_app(effects, effect="idempotent", value=lambda: 1))
    sub = h.admit("t", None, agent="flow")
    with pytest.raises(ValidationFailed):
        h.ledger.request_abort(sub.id, reason)
    assert h.get(sub.id).state is SubmissionState.QUEUED
    assert h.ledger.read_abort_intent(sub.id) is None


def test_10_a_running_submission_keeps_its_abort_reason(
    make_harness: MakeHarness, effects: Effects
) -> None:
    holder: dict[str, ThreadHarness] = {}

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flow")
        async def flow(turn: Turn) -> Any:
            await turn.step("a", lambda: holder["h"].ledger.request_abort(
                turn.submission_id, "superseded by a newer request").id)
            await turn.step("b", lambda: effects.hit("b"))
            return "done"

        return app

    h = make_harness(build)
    holder["h"] = h
    sub = h.admit("t", None, agent="flow")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.ABORTED
    expected = {"type": "Aborted", "message": "superseded by a newer request"}
    assert settlement.error == expected and h.get(sub.id).error == expected
    assert effects.count("b") == 0


def test_10_an_abort_accepted_as_the_agent_returns_keeps_its_reason(
    make_harness: MakeHarness,
) -> None:
    holder: dict[str, ThreadHarness] = {}

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flow")
        async def flow(turn: Turn) -> Any:
            holder["h"].ledger.request_abort(turn.submission_id, "late")
            return "done"

        return app

    h = make_harness(build)
    holder["h"] = h
    sub = h.admit("t", None, agent="flow")
    run(h.runtime.process_thread_head("t"))
    assert h.get(sub.id).error == {"type": "Aborted", "message": "late"}


@pytest.mark.parametrize("value", [{1: "a"}, {"ok": {2.5: "b"}}, [{None: 1}], {True: 1}])
def test_10_non_string_object_keys_are_refused_at_admission(
    make_harness: MakeHarness, effects: Effects, value: Any
) -> None:
    h = make_harness(one_step_app(effects, effect="idempotent", value=lambda: 1))
    with pytest.raises(ValidationFailed, match="not a string"):
        h.admit("t", value, agent="flow", key="k1")


def test_10_the_value_read_back_readmits_under_its_key(
    make_harness: MakeHarness, effects: Effects
) -> None:
    h = make_harness(one_step_app(effects, effect="idempotent", value=lambda: 1))
    first = h.admit("t", {"10": "a", "9": "b"}, agent="flow", key="k1")
    again = h.ledger.admit("t", "flow", h.get(first.id).input, "k1")
    assert not again.created and again.submission.id == first.id
    with pytest.raises(Conflict):
        h.admit("t", {"10": "a"}, agent="flow", key="k1")


@pytest.mark.parametrize(
    "kind", ["submission.settled", "approval.requested", "threadline.x", "", "x" * 100_000,
             "has space", "9lives", 5],
)
def test_10_emit_refuses_reserved_and_malformed_kinds(
    make_harness: MakeHarness, kind: Any
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("emitter")
        async def emitter(turn: Turn) -> Any:
            return await turn.emit({"text": "hi"}, kind=kind)

        return app

    h = make_harness(build)
    sub = h.admit("t", None, agent="emitter")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert settlement.error["type"] == "ValidationFailed"
    assert h.get(sub.id).attempts == 1
    # The log holds the runtime's settlement only: nothing of the refused record.
    kinds = [row["kind"] for row in h.storage.exec("SELECT kind FROM tl_history")]
    assert kinds == ["submission.settled"]


def test_10_emit_accepts_an_agent_kind(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("emitter")
        async def emitter(turn: Turn) -> Any:
            return await turn.emit({"text": "hi"}, kind="assistant.message")

        return app

    h = make_harness(build)
    h.admit("t", None, agent="emitter")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.COMPLETED


@pytest.mark.parametrize("bad", [".", ".."])
def test_10_dot_ids_are_refused(make_harness: MakeHarness, effects: Effects, bad: str) -> None:
    h = make_harness(one_step_app(effects, effect="idempotent", value=lambda: 1))
    with pytest.raises(ValidationFailed):
        h.admit(bad, None, agent="flow")
    with pytest.raises(ValidationFailed):
        h.admit("t", None, agent="flow", key=bad)
    assert h.ledger.scan_nonterminal() == []


# -- more ways an Attempt can end that no retry fixes ---------------------------------------------


def test_3_an_approval_payload_the_storage_refuses_fails_at_once(
    clock: ManualClock, effects: Effects
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("ask")
        async def ask(turn: Turn) -> Any:
            effects.hit("body")
            return await turn.approval("publish", "x" * BIG)

        return app

    storage = SqliteStorage(":memory:", max_length=ROW_LIMIT)
    h = harness_on(storage, clock, build, RuntimeConfig(max_value_bytes=4 * BIG))
    sub = h.admit("t", None, agent="ask")
    settlement = run(h.runtime.process_thread_head("t"))
    assert settlement is not None and settlement.outcome is Outcome.FAILED
    assert "too big" in settlement.error["message"]
    assert h.get(sub.id).attempts == 1 and effects.count("body") == 1
    assert storage.exec("SELECT COUNT(*) AS n FROM tl_waits").scalar() == 0


def test_3_a_huge_error_message_is_recorded_cut_short(
    clock: ManualClock, effects: Effects
) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("loud")
        async def loud(turn: Turn) -> Any:
            effects.hit("body")
            raise RuntimeError("y" * (2 * ROW_LIMIT))

        return app

    storage = SqliteStorage(":memory:", max_length=ROW_LIMIT)
    h = harness_on(storage, clock, build, RuntimeConfig(max_attempts=2))
    sub = h.admit("t", None, agent="loud")
    assert run(h.runtime.process_thread_head("t")) is None
    waiting = h.get(sub.id)
    assert waiting.state is SubmissionState.READY and waiting.error is not None
    assert waiting.error["type"] == "RuntimeError"
    assert len(waiting.error["message"]) < 2_100
    assert waiting.error["message"].endswith(f"({2 * ROW_LIMIT} characters)")
    run(settle_all(h, clock))
    assert h.get(sub.id).outcome is Outcome.FAILED and effects.count("body") == 2


def test_8_a_foreign_base_exception_from_an_uncertain_step_is_not_left_in_flight(
    make_harness: MakeHarness, effects: Effects, clock: ManualClock
) -> None:
    """It returned control, like any error: recorded failed, so a retry may run it again."""

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("odd")
        async def odd(turn: Turn) -> Any:
            def act() -> str:
                if effects.hit("act") == 1:
                    raise Custom("refused before acting")
                return "acted"

            return await turn.step("act", act, effect="uncertain")

        return app

    h = make_harness(build)
    sub = h.admit("t", None, agent="odd")
    assert run(h.runtime.process_thread_head("t")) is None
    assert h.get(sub.id).state is SubmissionState.READY
    assert journal_states(h.storage, sub.id) == {"step:act": "failed"}
    run(settle_all(h, clock))
    assert h.get(sub.id).result == "acted" and effects.count("act") == 2


def test_7_a_short_event_deadline_derives_a_bound_inside_it() -> None:
    config = RuntimeConfig(event_deadline_ms=100_000, yield_after_ms=50_000)
    assert config.attempt_timeout_ms == 50_000
    assert RuntimeConfig(event_deadline_ms=100_000, yield_after_ms=50_000,
                         attempt_timeout_ms=99_999).attempt_timeout_ms == 99_999
    with pytest.raises(ValueError, match="attempt_timeout_ms must be < event_deadline_ms"):
        RuntimeConfig(event_deadline_ms=100_000, yield_after_ms=50_000,
                      attempt_timeout_ms=100_000)


def test_4_operator_decisions_are_bounded_too(make_harness: MakeHarness) -> None:
    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("ask")
        async def ask(turn: Turn) -> Any:
            return bool(await turn.approval("publish"))

        @app.agent("unsure")
        async def unsure(turn: Turn) -> Any:
            return await turn.step("send", lambda: None, effect="uncertain")

        return app

    h = make_harness(build)
    asked = h.admit("a", None, agent="ask")
    run(h.runtime.process_thread_head("a"))
    with pytest.raises(ValidationFailed, match=r"max_value_bytes \(262144\)"):
        h.ledger.decide_approval(asked.id, "publish", approved=True, payload="x" * BIG)
    with pytest.raises(ValidationFailed, match="max_json_depth"):
        h.ledger.decide_approval(asked.id, "publish", approved=True, payload=nested(65))
    assert h.get(asked.id).state is SubmissionState.SUSPENDED
    # An Unknown Outcome (lost in flight) accepts only a result within the limits.
    unsure = h.admit("u", None, agent="unsure")
    h.failpoints.evict_at("step:started")
    with pytest.raises(Evicted):
        run(h.runtime.process_thread_head("u"))
    h.evict()
    h.clock.advance(h.app.config.lease_ms)
    run(h.drive())
    assert h.get(unsure.id).state is SubmissionState.UNKNOWN
    with pytest.raises(ValidationFailed, match=r"max_value_bytes \(262144\)"):
        h.ledger.resolve_unknown(unsure.id, "accept", "x" * BIG)
    assert h.get(unsure.id).state is SubmissionState.UNKNOWN


@pytest.mark.parametrize("then", ["return", "raise NonRetryable"])
def test_1_an_agent_that_swallows_the_failed_write_cannot_settle_past_the_step(
    clock: ManualClock, effects: Effects, then: str
) -> None:
    """Returning (or failing for good) past an uncertain step in flight is an Unknown Outcome:
    the step may have acted though the agent saw an error, so an operator decides."""

    def build(config: RuntimeConfig) -> Application:
        app = Application(config)

        @app.agent("flow")
        async def flow(turn: Turn) -> Any:
            try:
                return await turn.step("act", lambda: effects.hit("act"), effect="uncertain")
            except StorageError as exc:
                if then == "return":
                    return "gave up"
                raise NonRetryable("gave up") from exc

        return app

    storage = FailingStorage()
    h = harness_on(storage, clock, build)
    sub = h.admit("t", None, agent="flow")
    storage.fail(finished_write)
    assert run(h.runtime.process_thread_head("t")) is None
    assert h.get(sub.id).state is SubmissionState.UNKNOWN
    h.ledger.resolve_unknown(sub.id, "accept", 1)
    run(settle_all(h, clock))
    done = h.get(sub.id)
    assert (done.outcome, done.result) == (Outcome.COMPLETED, 1)
    assert effects.count("act") == 1


def test_1_a_started_uncertain_entry_met_at_replay_is_never_run_again(
    make_harness: MakeHarness, effects: Effects
) -> None:
    """A ready submission whose uncertain step still reads `started` (left by code before this
    rule): the next Attempt parks it as an Unknown Outcome instead of running the step."""
    h = make_harness(one_step_app(effects, effect="uncertain", value=lambda: "ok"))
    sub = h.admit("t", None, agent="flow")
    h.storage.exec(
        "INSERT INTO tl_journal (submission_id, step_key, position, effect, state, attempt,"
        " started_at) VALUES (?, 'step:act', 1, 'uncertain', 'started', 1, 0)", sub.id)
    assert run(h.runtime.process_thread_head("t")) is None
    assert h.get(sub.id).state is SubmissionState.UNKNOWN
    assert effects.count("act") == 0


@pytest.mark.parametrize("bad", [".", ".."])
def test_10_dot_agent_names_are_refused_at_registration(bad: str) -> None:
    app = Application()

    async def agent(turn: Turn) -> Any:
        return None

    with pytest.raises(ValueError, match=r"not be \. or \.\."):
        app.agent(bad)(agent)
