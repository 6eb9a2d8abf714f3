"""``@app.subscriber`` checks its declaration at once; ``@app.on_settled`` is a subscriber to
``submission.settled`` records and gets those alone."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from subscribers_support import Recorder, clock, emit, writer_app

from threadline import Application, Record, SchedulingError
from threadline.records import SUBMISSION_SETTLED
from threadline.testing import SimulatedObject


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
