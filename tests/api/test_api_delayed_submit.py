"""POST .../submissions with ``not_before``: scheduled until its due time (listed with it), then
admitted into the Thread's FIFO; a time in the past admits at once; anything malformed, naive or
beyond 366 days is a 422 naming the field, writing nothing."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api, run

from threadline.threads.model import MAX_SLEEP_SECONDS

START = 1_700_000_000_000  # 2023-11-14T22:13:20Z, the clock fixture's start
DUE = START + 90_000
DUE_TEXT = "2023-11-15T00:14:50+02:00"  # DUE, written with an offset


def _fire(api: Api) -> None:
    """One maintenance pass now, as the alarm would run it."""
    run(api.space.alarm())


@pytest.mark.parametrize("not_before", [DUE_TEXT, "2023-11-14T22:14:50Z", DUE,
                                        "2023-11-14t22:14:49.9991z"])
def test_a_submission_due_later_is_scheduled_listed_with_its_due_time_then_admitted(
    api: Api, not_before: Any
) -> None:
    response = api.submit("t1", {"text": "later"}, agent="echo", not_before=not_before)
    assert response.status == 202, response.body
    view = response.json()
    assert (view["state"], view["seq"], view["not_before"]) == ("scheduled", None, DUE)
    assert response.headers["location"].endswith(view["id"])
    detail = api.call("GET", api.submission_path("t1", view["id"])).json()
    assert (detail["state"], detail["seq"], detail["not_before"]) == ("scheduled", None, DUE)
    assert detail["waits"] == [] and detail["abort"] is None
    now = api.submit("t1", {"text": "now"}, agent="echo").json()
    summary = api.call("GET", api.thread_path("t1")).json()
    assert [item["id"] for item in summary["open"]] == [now["id"]]
    assert summary["scheduled"] == [{"id": view["id"], "agent": "echo", "state": "scheduled",
                                     "not_before": DUE, "created_at": START}]
    assert summary["submissions"] == 1 and summary["open_submissions"] == 1
    api.drive()
    api.clock.set(DUE - 1)
    _fire(api)
    assert api.call("GET", api.submission_path("t1", view["id"])).json()["state"] == "scheduled"
    api.clock.set(DUE)
    _fire(api)
    api.drive()
    done = api.call("GET", api.submission_path("t1", view["id"])).json()
    assert (done["state"], done["seq"], done["result"]) == ("settled", 2, {"text": "later"})
    assert api.call("GET", api.thread_path("t1")).json()["scheduled"] == []


def test_a_due_time_in_the_past_admits_at_once(api: Api) -> None:
    response = api.submit("t1", {"text": "past"}, agent="echo",
                          not_before="2001-01-01T00:00:00+01:00")
    assert response.status == 202
    view = response.json()
    assert (view["state"], view["seq"], view["not_before"]) == ("queued", 1, 978_303_600_000)
    assert api.call("GET", api.thread_path("t1")).json()["scheduled"] == []


BOUND = START + MAX_SLEEP_SECONDS * 1_000


@pytest.mark.parametrize("not_before", [
    "2030-01-01T09:00:00",          # naive: no offset
    "2030-01-01",                   # a date, not a date-time
    "tomorrow",
    "2023-02-30T00:00:00Z",         # no such day
    "2030-01-01T09:00:00+0200",     # not RFC 3339's offset form
    True, 1.5, -1, {"at": DUE}, 2**53,
    BOUND + 1,                      # 366 days and a millisecond ahead
    "2024-11-14T22:13:20.001Z",     # the same, as text
])
def test_a_naive_malformed_or_too_distant_due_time_is_refused_naming_the_field(
    api: Api, not_before: Any
) -> None:
    before = api.dump()
    response = api.submit("t1", {"text": "x"}, agent="echo", not_before=not_before)
    assert response.status == 422, response.body
    problem = response.json()
    assert problem["field"] == "not_before", problem
    assert api.dump() == before


def test_a_due_time_366_days_ahead_is_accepted(api: Api) -> None:
    response = api.submit("t1", {"text": "x"}, agent="echo", not_before="2024-11-14T22:13:20Z")
    assert response.status == 202 and response.json()["not_before"] == BOUND
