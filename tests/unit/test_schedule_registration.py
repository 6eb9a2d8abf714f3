"""``@app.every`` and ``@app.cron`` refuse a bad declaration when the decorator is built, before
the function is even given: the id (malformed, reserved, or taken by a schedule or a host lane
of the same application), the interval, the expression, the time zone, the allowance; a host
lane cannot take a schedule's id either. A valid declaration registers the function unchanged."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from threadline import (
    Application,
    CronSchedule,
    EverySchedule,
    InvalidSchedule,
    ScheduleContext,
    SchedulingError,
)


async def noop(ctx: ScheduleContext) -> None:
    return None


def taken() -> Application:
    app = Application()
    app.every(timedelta(minutes=5), id="billing-sync")(noop)

    @app.lane("mirror")
    async def mirror(ctx: Any) -> None:
        return None

    return app


@pytest.mark.parametrize(
    ("declare", "says"),
    [
        (lambda app: app.every(timedelta(minutes=5), id="Billing"), "invalid schedule id"),
        (lambda app: app.every(timedelta(minutes=5), id="threadline:x"), "reserved prefix"),
        (lambda app: app.every(timedelta(0), id="x"), "from 1 second to 366 days"),
        (lambda app: app.every(timedelta(days=367), id="x"), "from 1 second to 366 days"),
        (lambda app: app.every(300, id="x"), "must be a timedelta"),
        (lambda app: app.cron("0 25 * * *", id="x"), "Bad hour"),
        (lambda app: app.cron("0 9 * * *", tz="Mars/Olympus", id="x"), "unknown time zone"),
        (lambda app: app.every(timedelta(minutes=1), id="billing-sync"), "already declared"),
        (lambda app: app.cron("0 9 * * *", id="billing-sync"), "already declared"),
        (lambda app: app.every(timedelta(minutes=1), id="mirror"), "a host lane already"),
        (lambda app: app.every(timedelta(minutes=1), id="x",
                               dispatch_timeout=timedelta(minutes=6)), "dispatch_timeout"),
        (lambda app: app.cron("0 9 * * *", id="x", dispatch_timeout=30), "dispatch_timeout"),
    ],
)
def test_a_bad_schedule_is_refused_when_the_decorator_is_built(
    declare: Callable[[Application], Any], says: str
) -> None:
    app = taken()
    with pytest.raises(InvalidSchedule, match=says):
        declare(app)
    assert [item.id for item in app.schedules] == ["billing-sync"]


def test_a_host_lane_cannot_take_a_schedule_id() -> None:
    app = taken()
    with pytest.raises(SchedulingError, match="a schedule already has that id"):
        app.lane("billing-sync")
    assert "billing-sync" not in app.lanes


def test_a_function_that_is_not_callable_is_refused() -> None:
    app = Application()
    with pytest.raises(InvalidSchedule, match="must be callable"):
        app.every(timedelta(minutes=5), id="x")("not a function")  # type: ignore[type-var]


def test_a_valid_declaration_registers_the_function_unchanged() -> None:
    app = Application()
    every = app.every(timedelta(minutes=5), id="billing-sync")(noop)
    cron = app.cron("0 9 * * MON-FRI", tz="Europe/Paris", id="digest",
                    dispatch_timeout=timedelta(seconds=90))(noop)
    assert every is noop and cron is noop
    declared = {item.id: item for item in app.schedules}
    assert declared["billing-sync"].schedule == EverySchedule("billing-sync",
                                                              timedelta(minutes=5))
    assert declared["digest"].schedule == CronSchedule("digest", "0 9 * * MON-FRI",
                                                       tz="Europe/Paris")
    assert declared["billing-sync"].dispatch_timeout_ms == 30_000
    assert declared["digest"].dispatch_timeout_ms == 90_000
