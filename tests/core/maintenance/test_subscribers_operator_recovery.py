"""Operators recover a stopped subscriber or a parked lane without a deploy: resume from the
cursor, skip the one record at the cursor (logged with who did it), restart from a position,
retry a parked lane now. Each action commits with its alarm; a refusal writes nothing."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from subscribers_support import CONFIG, Recorder, clock, emit, log_end, row, writer_app

from threadline import Application, DeliveryRefused, LaneContext
from threadline.access import SUBJECT_HEADER
from threadline.api.http import Request
from threadline.scheduling import LaneState
from threadline.testing import SimulatedObject
from threadline.threads.records import SUBSCRIBER_SKIPPED

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "destinations"))
from destination_support import FakeQueue

OPERATOR = "ops:carol"


async def _post(obj: SimulatedObject, path: str, body: Any = None,
                subject: str | None = OPERATOR) -> tuple[int, Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    headers = {} if subject is None else {SUBJECT_HEADER: subject}
    response = await obj.space.handle(Request.from_url(
        "POST", f"http://object/v1/spaces/{obj.name}{path}", headers, raw))
    return response.status, response.json()


def _dump(obj: SimulatedObject) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every ``tl_`` table, in a stable order."""
    tables = [str(item["name"]) for item in obj.storage.exec(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tl_%'")]
    return {table: sorted((tuple(item.values())
                           for item in obj.storage.exec(f"SELECT * FROM {table}")), key=repr)
            for table in tables}


def _queued_seqs(queue: FakeQueue) -> list[tuple[int, str]]:
    return [(body["record"]["seq"], body["record"]["kind"])
            for call in queue.calls for body in call]


async def _poison() -> None:
    app = writer_app()
    app.queue("audit", binding="EVENTS")
    queue = FakeQueue()
    async with SimulatedObject(app, clock=clock(), env={"EVENTS": queue}, space="acme",
                               check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", {"n": 1}))
        await obj.run_alarms()
        assert _queued_seqs(queue) == [(1, "note"), (2, "submission.settled")]
        emit(obj, "t", ("note", {"text": "x" * 130_000}))  # over the Queue's 128 KB
        await obj.run_alarms()
        parked = row(obj, "audit")
        assert parked is not None and parked.parked and parked.cursor == 2
        assert parked.detail is not None and "seq 3" in parked.detail
        emit(obj, "t", ("note", {"n": 3}))
        await obj.run_alarms()
        assert len(queue.calls) == 1  # nothing after the oversized record is sent

        status, answer = await _post(obj, "/subscribers/audit/skip", {"cursor": 2})
        assert status == 200, answer
        assert answer["skipped"]["seq"] == 3 and answer["skipped"]["position"] == 3
        assert answer["subscriber"]["state"] == "delivering"
        assert answer["subscriber"]["cursor"] == 3 and answer["subscriber"]["failures"] == 0
        assert obj.alarm_at is not None  # the skip committed with its alarm
        await obj.run_alarms()

        # Everything after it, in order: the settlement of the skipped record's submission,
        # the next submission's records, and the skip's own record.
        assert _queued_seqs(queue)[2:] == [
            (4, "submission.settled"), (5, "note"), (6, "submission.settled"),
            (7, SUBSCRIBER_SKIPPED)]
        done = row(obj, "audit")
        assert done is not None and not done.parked and done.cursor == log_end(obj)
        logged = obj.storage.exec(
            "SELECT body_json FROM tl_history WHERE thread_id = 't' AND kind = ?",
            SUBSCRIBER_SKIPPED).rows
        assert len(logged) == 1
        body = json.loads(str(logged[0]["body_json"]))
        assert body["skipped_by"] == OPERATOR and body["subscriber"] == "audit"
        assert body["seq"] == 3 and body["kind"] == "note"


def test_a_queue_subscriber_parked_on_an_oversized_record_sends_all_after_it_once_skipped(
) -> None:
    asyncio.run(_poison())


def _refusing_app(recorder: Recorder, *, required: bool = False) -> Application:
    app = writer_app()
    app.subscriber("crm", required=required)(recorder)
    return app


def _refuse(recorder: Recorder) -> None:
    recorder.fail = lambda batch: DeliveryRefused("crm refused", detail="HTTP 400")


def _accept(recorder: Recorder) -> None:
    recorder.fail = lambda batch: None


async def _resume() -> None:
    recorder = Recorder()
    async with SimulatedObject(_refusing_app(recorder), clock=clock(), space="acme",
                               check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        _refuse(recorder)
        emit(obj, "t", ("note", 2))
        await obj.run_alarms()
        parked = row(obj, "crm")
        assert parked is not None and parked.parked and parked.cursor == 2
        _accept(recorder)
        status, answer = await _post(obj, "/subscribers/crm/resume")
        assert status == 200, answer
        assert answer["state"] == "delivering" and answer["failures"] == 0
        assert answer["error"] is None and answer["detail"] is None
        # Committed with its alarm: the pass that delivers comes within the minimum delay.
        assert obj.alarm_at is not None
        assert obj.alarm_at <= obj.clock.now_ms() + obj.space.scheduler.alarm.min_delay_ms
        await obj.run_alarms()
        # From its cursor: the first submission's records are not delivered again.
        assert [r.seq for r in recorder.records] == [1, 2, 3, 4]
        resumed = row(obj, "crm")
        assert resumed is not None and resumed.cursor == log_end(obj) == 4
        before = _dump(obj)
        status, answer = await _post(obj, "/subscribers/crm/resume")
        assert status == 409 and "not parked or backing off" in answer["detail"]
        assert _dump(obj) == before


def test_resuming_a_parked_subscriber_delivers_from_its_cursor_without_a_replay() -> None:
    asyncio.run(_resume())


async def _resume_required() -> None:
    recorder = Recorder()
    async with SimulatedObject(_refusing_app(recorder, required=True), clock=clock(), space="acme",
                               check_alarm_invariant=True) as obj:
        _refuse(recorder)
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        held = emit(obj, "t", ("note", 2))
        await obj.run_alarms(until=obj.clock.now_ms() + 3_600_000)
        assert obj.submission(held).state.value == "queued"
        _accept(recorder)
        status, _ = await _post(obj, "/subscribers/crm/resume")
        assert status == 200
        await obj.run_alarms()
        assert obj.submission(held).state.value == "settled"
        assert [r.seq for r in recorder.records] == [1, 2, 3, 4]


def test_resuming_a_required_subscriber_lets_the_native_work_it_held_run() -> None:
    asyncio.run(_resume_required())


async def _stale_skip() -> None:
    recorder = Recorder()
    async with SimulatedObject(_refusing_app(recorder), clock=clock(), space="acme",
                               check_alarm_invariant=True) as obj:
        _refuse(recorder)
        emit(obj, "t", ("note", 1), ("note", 2))
        await obj.run_alarms()
        before = _dump(obj)
        status, answer = await _post(obj, "/subscribers/crm/skip",
                                     {"cursor": 0, "record_id": "not-the-one"})
        assert status == 409 and answer["at_cursor"].endswith(":emit")
        assert _dump(obj) == before
        status, answer = await _post(obj, "/subscribers/crm/skip", {"cursor": 5})
        assert status == 409 and answer["current"] == 0
        assert _dump(obj) == before
        status, first = await _post(obj, "/subscribers/crm/skip", {"cursor": 0})
        assert status == 200 and first["skipped"]["seq"] == 1
        after = _dump(obj)
        # The same request again: the cursor moved, so it changes nothing.
        status, again = await _post(obj, "/subscribers/crm/skip", {"cursor": 0})
        assert status == 409 and again["current"] == 1
        assert _dump(obj) == after


def test_a_repeated_or_stale_skip_changes_nothing() -> None:
    asyncio.run(_stale_skip())


async def _restart() -> None:
    recorder = Recorder()
    async with SimulatedObject(_refusing_app(recorder), clock=clock(), space="acme",
                               check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        emit(obj, "u", ("note", 2))
        await obj.run_alarms()
        assert [(r.thread_id, r.seq) for r in recorder.records] == [
            ("t", 1), ("t", 2), ("u", 1), ("u", 2)]
        end = log_end(obj)
        before = _dump(obj)
        for position in (end + 1, -1):
            status, answer = await _post(obj, "/subscribers/crm/restart",
                                         {"position": position})
            assert status == 422 and answer["field"] == "position"
            assert _dump(obj) == before
        status, answer = await _post(obj, "/subscribers/crm/restart", {"position": 2})
        assert status == 200 and answer["cursor"] == 2
        await obj.run_alarms()
        # From position 2 on: Thread u's records, not Thread t's again.
        assert [(r.thread_id, r.seq) for r in recorder.records[4:]] == [("u", 1), ("u", 2)]
        settled = _dump(obj)
        status, answer = await _post(obj, "/subscribers/crm/restart", {"position": end})
        assert status == 200 and answer["cursor"] == end
        assert _dump(obj) == settled  # already there: nothing to change


def test_restarting_from_a_position_delivers_from_there_and_refuses_one_outside_the_log(
) -> None:
    asyncio.run(_restart())


async def _unknown() -> None:
    recorder = Recorder()
    async with SimulatedObject(_refusing_app(recorder), clock=clock(), space="acme") as obj:
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        before = _dump(obj)
        for path, body in (("/subscribers/nope/resume", None),
                           ("/subscribers/nope/skip", {"cursor": 0}),
                           ("/subscribers/nope/restart", {"position": 0}),
                           ("/lanes/nope/retry", None)):
            status, answer = await _post(obj, path, body)
            assert status == 404, (path, answer)
        status, answer = await _post(obj, "/subscribers/crm/skip", {"cursor": 2})
        assert status == 409 and "not parked" in answer["detail"]
        status, answer = await _post(obj, "/lanes/threadline:native/retry")
        assert status == 409 and "not parked" in answer["detail"]
        assert _dump(obj) == before


def test_actions_on_an_unknown_or_running_subscriber_or_lane_are_refused_and_write_nothing(
) -> None:
    asyncio.run(_unknown())


async def _lane() -> None:
    app = Application(CONFIG.model_copy(update={"park_after_stalls": 3}))
    runs: list[int] = []
    healthy = False

    @app.lane("poll")
    async def poll(ctx: LaneContext) -> datetime | None:
        runs.append(int(ctx.now.timestamp() * 1000))
        if healthy:
            return None
        return ctx.now + timedelta(minutes=1)

    async with SimulatedObject(app, clock=clock(), space="acme", check_alarm_invariant=True) as obj:
        await obj.run_alarms()
        obj.wake_lane("poll")
        await obj.run_alarms(until=obj.clock.now_ms() + 10 * 60_000)
        parked = obj.space.scheduler.due_queue.get("poll")
        assert parked is not None and parked.state is LaneState.PARKED and len(runs) == 3
        healthy = True
        now = obj.clock.now_ms()
        status, answer = await _post(obj, "/lanes/poll/retry")
        assert status == 200 and answer["state"] == "due" and answer["stalls"] == 0
        assert answer["due_at"] == now and obj.alarm_at is not None
        await obj.run_alarms(until=now + 1_000)
        assert len(runs) == 4 and runs[-1] <= now + 1_000
        idle = obj.space.scheduler.due_queue.get("poll")
        assert idle is not None and idle.state is LaneState.IDLE
        status, answer = await _post(obj, "/lanes/poll/retry")
        assert status == 409


def test_a_parked_lane_retried_by_an_operator_runs_at_once() -> None:
    asyncio.run(_lane())


async def _subject_free_skip() -> None:
    recorder = Recorder()
    async with SimulatedObject(_refusing_app(recorder), clock=clock(), space="acme") as obj:
        _refuse(recorder)
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        status, _ = await _post(obj, "/subscribers/crm/skip", {"cursor": 0}, subject=None)
        assert status == 200
        body = obj.storage.exec("SELECT body_json FROM tl_history WHERE kind = ?",
                                SUBSCRIBER_SKIPPED).one()["body_json"]
        assert "skipped_by" not in json.loads(str(body))


def test_a_skip_by_an_unnamed_principal_records_no_subject() -> None:
    asyncio.run(_subject_free_skip())



async def _poison_mid_batch() -> None:
    app = writer_app()
    app.queue("audit", binding="EVENTS")
    queue = FakeQueue()
    async with SimulatedObject(app, clock=clock(), env={"EVENTS": queue}, space="acme",
                               check_alarm_invariant=True) as obj:
        # One turn: a record, one over the Queue's 128 KB, another record.
        emit(obj, "t", ("note", {"n": 1}), ("note", {"text": "x" * 130_000}),
             ("note", {"n": 3}))
        await obj.run_alarms()
        # The record before the oversized one is sent; the subscriber parks on that one.
        assert _queued_seqs(queue) == [(1, "note")]
        parked = row(obj, "audit")
        assert parked is not None and parked.parked and parked.cursor == 1
        oversized = obj.storage.exec(
            "SELECT record_id FROM tl_history WHERE seq = 2").one()["record_id"]
        status, answer = await _post(obj, "/subscribers/audit/skip",
                                     {"cursor": 1, "record_id": oversized})
        assert status == 200, answer
        await obj.run_alarms()
        assert _queued_seqs(queue) == [(1, "note"), (3, "note"), (4, "submission.settled"),
                                       (5, SUBSCRIBER_SKIPPED)]


def test_a_queue_subscriber_parks_on_the_oversized_record_itself_so_a_skip_loses_nothing_else(
) -> None:
    asyncio.run(_poison_mid_batch())


async def _bump() -> None:
    def app(version: int) -> Application:
        declared = writer_app()
        declared.queue("audit", binding="EVENTS", version=version)
        return declared

    queue = FakeQueue()
    async with SimulatedObject(app(1), clock=clock(), env={"EVENTS": queue}, space="acme",
                               check_alarm_invariant=True) as obj:
        emit(obj, "t", ("note", {"n": 1}))
        await obj.run_alarms()
        emit(obj, "t", ("note", {"text": "x" * 130_000}))
        emit(obj, "t", ("note", {"n": 3}))
        await obj.run_alarms()
        assert row(obj, "audit").cursor == 2  # type: ignore[union-attr]
        await obj.redeploy(app(2))
        await obj.run_alarms()
        # The whole log again, and the same parking: a bump never gets past the record.
        again = row(obj, "audit")
        assert again is not None and again.parked and again.cursor == 2
        assert _queued_seqs(queue) == [(1, "note"), (2, "submission.settled")] * 2
        status, _ = await _post(obj, "/subscribers/audit/skip", {"cursor": 2})
        assert status == 200
        await obj.run_alarms()
        assert _queued_seqs(queue)[4:] == [(4, "submission.settled"), (5, "note"),
                                           (6, "submission.settled"), (7, SUBSCRIBER_SKIPPED)]


def test_a_version_bump_parks_again_on_the_oversized_record_where_a_skip_gets_past_it(
) -> None:
    asyncio.run(_bump())


async def _forged() -> None:
    async with SimulatedObject(writer_app(), clock=clock(), space="acme") as obj:
        forged = emit(obj, "t", (SUBSCRIBER_SKIPPED, {"subscriber": "audit",
                                                      "skipped_by": "ops:carol"}))
        await obj.run_alarms()
        assert obj.submission(forged).outcome is not None
        assert obj.submission(forged).outcome.value == "failed"
        assert obj.storage.exec("SELECT COUNT(*) AS n FROM tl_history WHERE kind = ?",
                                SUBSCRIBER_SKIPPED).one()["n"] == 0


def test_an_agent_cannot_forge_an_operators_skip_record() -> None:
    asyncio.run(_forged())


async def _half() -> None:
    recorder = Recorder()
    async with SimulatedObject(_refusing_app(recorder), clock=clock(), space="acme",
                               check_alarm_invariant=True) as obj:
        _refuse(recorder)
        emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        before = _dump(obj)
        # The skip's cursor write goes, then the append of its record fails: both roll back.
        obj.fail_statements("INSERT INTO tl_history")
        status, _ = await _post(obj, "/subscribers/crm/skip", {"cursor": 0})
        assert status == 500
        assert _dump(obj) == before
        parked = row(obj, "crm")
        assert parked is not None and parked.parked and parked.cursor == 0
        # The pass still sees it parked, and the same request then succeeds.
        await obj.run_alarms()
        assert recorder.records == []
        status, _ = await _post(obj, "/subscribers/crm/skip", {"cursor": 0})
        assert status == 200
        _accept(recorder)
        await obj.run_alarms()
        assert [r.seq for r in recorder.records] == [2, 3]


def test_a_skip_whose_log_record_cannot_be_written_changes_nothing() -> None:
    asyncio.run(_half())


def _history(obj: SimulatedObject, thread: str) -> list[Any]:
    """The Thread's records as committed, in log order."""
    from types import SimpleNamespace

    return [SimpleNamespace(record_id=item["record_id"], seq=item["seq"], kind=item["kind"],
                            body=json.loads(item["body_json"]))
            for item in obj.storage.exec(
                "SELECT record_id, seq, kind, body_json FROM tl_history WHERE thread_id = ?"
                " ORDER BY seq", thread)]


def _poisoned_app(recorder: Recorder) -> Application:
    """A required subscriber whose destination refuses, for good, any batch holding a record
    whose body is "poison"."""
    app = writer_app()
    app.subscriber("crm", required=True)(recorder)
    recorder.fail = lambda batch: (DeliveryRefused("crm refused", detail="HTTP 422")
                                   if any(r.body == "poison" for r in batch) else None)
    return app


async def _skip_held() -> None:
    from subscribers_support import holds, maintenance_view

    recorder = Recorder()
    async with SimulatedObject(_poisoned_app(recorder), clock=clock(), space="acme",
                               check_alarm_invariant=True) as obj:
        emit(obj, "a", ("note", "poison"))
        emit(obj, "b", ("note", "fine"))
        await obj.run_alarms()
        held = emit(obj, "a", ("note", "after"))
        await obj.run_alarms(until=obj.clock.now_ms() + 3_600_000)
        assert obj.submission(held).state.value == "queued"
        view = {item["name"]: item for item in (await maintenance_view(obj))["subscribers"]}
        [shown] = view["crm"]["held_threads"]
        assert (shown["thread"], shown["state"]) == ("a", "parked")
        poison = next(r for r in _history(obj, "a") if r.body == "poison")
        assert shown["record_id"] == poison.record_id
        cursor = view["crm"]["cursor"]

        status, answer = await _post(obj, "/subscribers/crm/skip",
                                     {"cursor": cursor, "record_id": poison.record_id})
        assert status == 200, answer
        assert answer["skipped"]["thread_id"] == "a"
        assert answer["skipped"]["record_id"] == poison.record_id
        assert obj.alarm_at is not None  # committed with its alarm
        before = _dump(obj)
        status, again = await _post(obj, "/subscribers/crm/skip",
                                    {"cursor": cursor, "record_id": poison.record_id})
        assert status == 409, again
        assert _dump(obj) == before  # a repeated skip changes nothing
        await obj.run_alarms()

        assert obj.submission(held).state.value == "settled"
        assert holds(obj, "crm") == {}
        delivered = [r.record_id for r in recorder.records]
        assert poison.record_id not in delivered
        # Every other record of a, in order, the skip's own record among them; b's untouched.
        a_rest = [r.record_id for r in _history(obj, "a") if r.record_id != poison.record_id]
        assert [i for i in delivered if i in a_rest] == a_rest
        skip_records = [r for r in _history(obj, "a") if r.kind == SUBSCRIBER_SKIPPED]
        assert [r.body["skipped_by"] for r in skip_records] == [OPERATOR]
        assert recorder.per_thread()["b"] == [r.seq for r in _history(obj, "b")]


def test_a_skip_moves_a_required_subscriber_past_the_record_it_is_parked_on_in_one_thread() -> None:
    asyncio.run(_skip_held())


async def _restart_held() -> None:
    from subscribers_support import holds

    recorder = Recorder()
    async with SimulatedObject(_poisoned_app(recorder), clock=clock(), space="acme",
                               check_alarm_invariant=True) as obj:
        emit(obj, "a", ("note", "poison"))
        await obj.run_alarms()
        held = emit(obj, "a", ("note", "after"))
        await obj.run_alarms(until=obj.clock.now_ms() + 3_600_000)
        assert list(holds(obj, "crm")) == ["a"]
        end = log_end(obj)
        status, answer = await _post(obj, "/subscribers/crm/restart", {"position": end})
        assert status == 200, answer
        # A jump to the log's end: the hold's records are the cursor's, and behind it.
        assert holds(obj, "crm") == {} and answer["held_threads"] == []
        await obj.run_alarms()
        assert obj.submission(held).state.value == "settled"
        assert "poison" not in [r.body for r in recorder.records]


def test_restarting_a_required_subscriber_drops_its_holds_and_lets_held_work_run() -> None:
    asyncio.run(_restart_held())
