"""``@app.subscriber`` checks its declaration at once; ``@app.on_settled`` is a subscriber to
``submission.settled`` records and gets those alone."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from subscribers_support import Recorder, clock, emit, writer_app

from threadline import Application, Record, SchedulingError
from threadline.delivery.subscribers import MAX_BATCH, MAX_DISPATCH_TIMEOUT, MIN_DISPATCH_TIMEOUT
from threadline.testing import SimulatedObject
from threadline.threads.records import SUBMISSION_SETTLED


def test_a_bad_declaration_fails_when_the_decorator_runs() -> None:
    app = Application()
    for bad in ({"name": "1st"}, {"name": "ok", "batch": 0}, {"name": "ok", "kinds": "x"},
                {"name": "ok", "start": "later"}, {"name": "ok", "version": 0},
                {"name": "ok", "dispatch_timeout": timedelta(minutes=10)}):
        with pytest.raises(SchedulingError):
            app.subscriber(**bad)  # type: ignore[arg-type]
    app.subscriber("once")(Recorder())
    with pytest.raises(SchedulingError, match="already declared"):
        app.subscriber("once")


def test_on_settled_subscribes_to_settlement_records() -> None:
    app = Application()

    @app.on_settled
    async def settled(batch: list[Record]) -> None:
        del batch

    @app.on_settled(name="settled-required", required=True)
    async def gate(batch: list[Record]) -> None:
        del batch

    specs = {spec.name: spec for spec in app.subscribers}
    assert specs["settled"].kinds == frozenset({SUBMISSION_SETTLED})
    assert specs["settled-required"].kinds == frozenset({SUBMISSION_SETTLED})
    assert specs["settled-required"].required and not specs["settled"].required


async def _settled_only() -> None:
    app = writer_app()
    got = Recorder()
    app.on_settled(name="settled")(got)
    async with SimulatedObject(app, clock=clock(), check_alarm_invariant=True) as obj:
        first = emit(obj, "t", ("note", 1))
        await obj.run_alarms()
        second = emit(obj, "t", ("note", 2), ("note", 3))
        await obj.run_alarms()
        # The settlement records the runtime appended, each after its submission's records;
        # none of the emitted records.
        assert [(r.kind, r.seq, r.submission_id, r.body) for r in got.records] == [
            (SUBMISSION_SETTLED, 2, first,
             {"submission_id": first, "outcome": "completed", "result": {"emitted": 1}}),
            (SUBMISSION_SETTLED, 5, second,
             {"submission_id": second, "outcome": "completed", "result": {"emitted": 2}}),
        ]
        assert [r.record_id for r in got.records] == [f"{first}:settled", f"{second}:settled"]


def test_on_settled_gets_settlement_records_alone() -> None:
    asyncio.run(_settled_only())


def test_a_bool_version_or_batch_is_refused() -> None:
    app = Application()
    for bad in ({"name": "ok", "version": True}, {"name": "ok", "batch": True},
                {"name": "ok", "version": "2"}, {"name": "ok", "batch": "10"}):
        with pytest.raises(SchedulingError):
            app.subscriber(**bad)  # type: ignore[arg-type]


def test_the_batch_and_dispatch_timeout_bounds_are_inclusive() -> None:
    app = Application()
    for i, options in enumerate(({"batch": 1}, {"batch": MAX_BATCH},
                                 {"dispatch_timeout": MIN_DISPATCH_TIMEOUT},
                                 {"dispatch_timeout": MAX_DISPATCH_TIMEOUT})):
        app.subscriber(f"ok{i}", **options)(Recorder())  # type: ignore[arg-type]
    for bad in ({"batch": MAX_BATCH + 1},
                {"dispatch_timeout": MIN_DISPATCH_TIMEOUT - timedelta(microseconds=1)},
                {"dispatch_timeout": MAX_DISPATCH_TIMEOUT + timedelta(milliseconds=1)}):
        with pytest.raises(SchedulingError):
            app.subscriber("bad", **bad)  # type: ignore[arg-type]
