"""Retention: settled work older than ``retention_ms`` is deleted in bounded waves on the alarm,
never before every subscriber consumed it and never while anything still refers to it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError
from retention_support import DAY_MS, START, chat_app, chat_days, config, count, seqs

from threadline import Application, DeliveryRefused, ManualClock, Record, RuntimeConfig, Turn
from threadline.maintenance import retention_lane
from threadline.scheduling import RETENTION
from threadline.testing import SimulatedObject
from threadline.testing.alarm_invariants import alarm_invariant_problem
from threadline.threads import SubmissionState


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def settle(obj: SimulatedObject) -> None:
    """Fire the alarms due within the next minute: what was just admitted runs."""
    await obj.run_alarms(until=obj.clock.now_ms() + 60_000)


def test_retention_is_off_by_default_and_deletes_nothing() -> None:
    async def go() -> None:
        async with SimulatedObject(chat_app(config()), clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            await chat_days(obj, "t", days=40, per_day=3)
            assert count(obj, "tl_history") == 240
            assert count(obj, "tl_submissions") == 120
            lane = obj.space.scheduler.due_queue.get(RETENTION)
            assert lane is None or lane.due_at is None
            assert obj.alarm_at is None

    _run(go())


def test_settled_work_older_than_retention_is_deleted_on_the_alarm() -> None:
    async def go() -> None:
        async with SimulatedObject(chat_app(config(retention_days=30)), clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            await chat_days(obj, "t", days=60, per_day=4)
            cutoff = obj.clock.now_ms() - 30 * DAY_MS
            # Within a wave interval of the cutoff, nothing older is left.
            oldest = obj.storage.exec(
                "SELECT MIN(created_at) AS at FROM tl_history").one()["at"]
            assert oldest >= cutoff - retention_lane.WAVE_INTERVAL_MS
            kept = seqs(obj, "t")
            assert kept == list(range(kept[0], 481)) and kept[0] > 200
            # A submission goes with its settlement record, its journal with it.
            assert count(obj, "tl_submissions") < 130
            assert count(obj, "tl_journal") == count(obj, "tl_submissions")
            orphans = count(obj, "tl_journal",
                            "submission_id NOT IN (SELECT id FROM tl_submissions)")
            assert orphans == 0
            # Every kept submission's records are all still there (none half-deleted).
            first_kept = kept[0]
            for row in obj.storage.exec(
                    "SELECT submission_id, MIN(seq) AS lo FROM tl_history"
                    " WHERE submission_id IS NOT NULL GROUP BY submission_id"):
                if int(row["lo"]) == first_kept:
                    continue
                assert count(obj, "tl_history", "submission_id = ?", row["submission_id"]) == 2

    _run(go())


def test_retention_waits_for_every_subscriber_cursor() -> None:
    refusing = {"on": True}

    def audited(version: int) -> Application:
        app = chat_app(config(retention_days=30))

        @app.subscriber("audit", version=version)
        async def audit(batch: list[Record]) -> None:
            if refusing["on"] and any(record.seq > 40 for record in batch):
                raise DeliveryRefused("audit store full")

        return app

    app = audited(1)

    async def go() -> None:
        async with SimulatedObject(app, clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            await chat_days(obj, "t", days=60, per_day=4)
            row = obj.storage.exec(
                "SELECT cursor, state FROM tl_subscribers WHERE name = 'audit'").one()
            assert row["state"] == "parked" and int(row["cursor"]) == 40
            # What it consumed went; every record past its cursor is kept, however old.
            assert seqs(obj, "t") == list(range(41, 481))
            # Once it consumes them (started over by a version bump here), they go too.
            refusing["on"] = False
            await obj.redeploy(audited(2))
            obj.clock.advance(retention_lane.WAVE_INTERVAL_MS)
            await settle(obj)
            # The wave of that pass ran beside the backfill, and found the cursor at 0; the
            # next one, within the hour, finds it at the end.
            assert seqs(obj, "t")[0] == 41
            obj.clock.advance(retention_lane.WAVE_INTERVAL_MS)
            await settle(obj)
            assert min(seqs(obj, "t")) > 240

    _run(go())


def test_retention_keeps_the_records_of_an_open_submission_and_everything_after() -> None:
    async def go() -> None:
        async with SimulatedObject(chat_app(config(retention_days=30)), clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            await chat_days(obj, "t", days=2, per_day=4)
            waiting = obj.admit("t", "approve", {})
            await settle(obj)
            assert obj.submission(waiting.id).state is SubmissionState.SUSPENDED
            obj.clock.advance(60 * DAY_MS)
            await settle(obj)
            # Its own records (emitted, approval.requested) are what an Attempt replays against.
            kinds = [str(row["kind"]) for row in obj.storage.exec(
                "SELECT kind FROM tl_history WHERE submission_id = ? ORDER BY seq", waiting.id)]
            assert kinds == ["record", "approval.requested"]
            assert seqs(obj, "t") == [17, 18]
            obj.approve(waiting.id, "go")
            await settle(obj)
            assert obj.submission(waiting.id).result == {"approved": True}

    _run(go())


def test_retention_keeps_a_thread_newest_record_and_submission_so_its_seqs_go_on() -> None:
    async def go() -> None:
        async with SimulatedObject(chat_app(config(retention_days=30)), clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            await chat_days(obj, "t", days=1, per_day=3)
            obj.clock.advance(90 * DAY_MS)
            await settle(obj)
            # The last turn's settlement and its submission stay (the next seqs read them).
            assert seqs(obj, "t") == [6]
            assert count(obj, "tl_submissions") == 1
            later = obj.admit("t", "chat", {"text": "back"})
            assert later.seq == 4
            await settle(obj)
            assert seqs(obj, "t") == [6, 7, 8]

    _run(go())


def test_retention_keeps_a_submission_whose_message_is_still_pending() -> None:
    async def go() -> None:
        # The message is held pending by hand below (without a lane to retry it, which the
        # alarm invariant would rightly refuse): what matters is that it is pending.
        async with SimulatedObject(chat_app(config(retention_days=30)), clock=ManualClock(START),
                                   check_alarm_invariant=False) as obj:
            sender = obj.admit("t", "mailer", {"to": "x"})
            await settle(obj)
            await chat_days(obj, "t", days=1, per_day=2)
            obj.storage.exec(
                "UPDATE tl_messages SET state = 'pending', next_attempt_at = ?",
                obj.clock.now_ms() + 365 * DAY_MS)
            obj.clock.advance(60 * DAY_MS)
            await settle(obj)
            assert obj.submission(sender.id).state is SubmissionState.SETTLED
            assert count(obj, "tl_history", "submission_id = ? AND kind = 'submission.settled'",
                         sender.id) == 1
            assert count(obj, "tl_messages", "id LIKE ?", sender.id + ":%") == 1

    _run(go())


def test_an_idempotency_key_is_remembered_while_its_submission_is_kept() -> None:
    async def go() -> None:
        async with SimulatedObject(chat_app(config(retention_days=30)), clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            first = obj.admit("t", "chat", {"text": "a"}, key="k1")
            await settle(obj)
            obj.clock.advance(29 * DAY_MS)
            await settle(obj)
            assert obj.admit("t", "chat", {"text": "a"}, key="k1").id == first.id
            await chat_days(obj, "t", days=1, per_day=2)
            obj.clock.advance(31 * DAY_MS)
            await settle(obj)
            assert count(obj, "tl_submissions", "id = ?", first.id) == 0
            # Past the retention the key is forgotten with its submission: a new admission.
            assert obj.admit("t", "chat", {"text": "a"}, key="k1").id != first.id

    _run(go())


def test_a_retention_wave_is_bounded_and_leaves_its_lane_due_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retention_lane, "WAVE_RECORDS", 50)
    monkeypatch.setattr(retention_lane, "PRUNE_BATCH", 20)

    async def go() -> None:
        cfg = config(retention_days=1)
        async with SimulatedObject(chat_app(cfg, text_bytes=10), clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            await chat_days(obj, "t", days=1, per_day=60)
            obj.clock.advance(2 * DAY_MS)
            lane = obj.space.scheduler.due_queue.get(RETENTION)
            assert lane is not None and lane.due_at is not None
            obj.clock.set(max(obj.clock.now_ms(), lane.due_at))
            handler = obj.space.retention
            before = count(obj, "tl_history")
            wave_due = await handler.run_lane(obj.clock.now_ms(), obj.clock.now_ms() + 30_000)
            deleted = before - count(obj, "tl_history")
            # Three transactions of 20 records, the third ending the wave past its 50.
            assert deleted == 60
            assert wave_due == obj.clock.now_ms()
            await settle(obj)
            assert seqs(obj, "t") == [120]

    _run(go())


@pytest.mark.parametrize("days", [1, 30, 3_650])
def test_retention_config_takes_one_day_to_ten_years(days: int) -> None:
    assert RuntimeConfig(retention_ms=days * DAY_MS).retention_ms == days * DAY_MS
    assert RuntimeConfig().retention_ms is None


@pytest.mark.parametrize("value", [0, 1, 3_600_000, 86_399_999, 10**13])
def test_retention_config_is_validated(value: int) -> None:
    with pytest.raises(ValidationError, match="retention_ms"):
        RuntimeConfig(retention_ms=value)


def test_turning_retention_on_enrolls_its_lane_at_the_next_start() -> None:
    async def go() -> None:
        clock = ManualClock(START)
        async with SimulatedObject(chat_app(config()), clock=clock,
                                   check_alarm_invariant=True) as obj:
            await chat_days(obj, "t", days=40, per_day=2)
            assert obj.alarm_at is None
            await obj.redeploy(chat_app(config(retention_days=30)))
            assert obj.alarm_at is not None
            await settle(obj)
            assert min(seqs(obj, "t")) > 1

    _run(go())


def test_the_alarm_invariant_refuses_an_idle_retention_lane_while_retention_is_on() -> None:
    async def go() -> None:
        app = chat_app(config(retention_days=30))
        async with SimulatedObject(app, clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            await chat_days(obj, "t", days=2, per_day=2)
            assert alarm_invariant_problem(obj.storage, app, obj.clock.now_ms()) is None
            obj.storage.exec(
                "UPDATE tl_lanes SET due_at = NULL, state = 'idle' WHERE id = ?", RETENTION)
            problem = alarm_invariant_problem(obj.storage, app, obj.clock.now_ms())
            assert problem is not None and RETENTION in problem

    _run(go())


def test_retention_deletes_the_errors_of_a_submissions_failed_attempts_with_it() -> None:
    app = chat_app(config(retention_days=30, max_attempts=3))

    @app.agent("fails")
    async def fails(turn: Turn) -> None:
        raise ValueError(f"the provider refused, try {turn.attempt}")

    def mentions(obj: SimulatedObject) -> list[str]:
        """The tables that still hold the failures' text, anywhere in any column."""
        found = []
        for row in obj.storage.exec(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tl_%'"):
            table = row["name"]  # from sqlite_master of the test's own database
            columns = [c["name"] for c in obj.storage.exec(f'PRAGMA table_info("{table}")')]
            where = " OR ".join(f'CAST("{c}" AS TEXT) LIKE ?' for c in columns)
            if count(obj, f'"{table}"', where, *["%the provider refused%"] * len(columns)):
                found.append(table)
        return found

    async def go() -> None:
        async with SimulatedObject(app, clock=ManualClock(START),
                                   check_alarm_invariant=True) as obj:
            failed = obj.admit("t", "fails", {})
            await obj.run_alarms(until=obj.clock.now_ms() + DAY_MS)
            assert [f.attempt for f in obj.submission(failed.id).failed_attempts] == [1, 2, 3]
            assert set(mentions(obj)) == {"tl_submissions", "tl_history"}
            await chat_days(obj, "t", days=40, per_day=2)
            assert mentions(obj) == []
            assert count(obj, "tl_submissions", "id = ?", failed.id) == 0

    _run(go())
