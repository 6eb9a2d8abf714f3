"""``not_before`` on POST .../submissions: an RFC 3339 time before 1970 is a time long past and
admits at once (it is not refused with two errors from the union's branches); a date-time
written with digits other than ASCII ones is malformed (its fraction's digits were taken
before); every refusal is one error naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api
from pydantic import ValidationError

from threadline.api.models import SubmitRequest


@pytest.mark.parametrize("not_before", ["1969-12-31T23:59:59Z", "0001-01-01T00:00:00+01:00"])
def test_a_due_time_before_1970_admits_at_once(api: Api, not_before: str) -> None:
    response = api.submit("t1", {"text": "long ago"}, agent="echo", not_before=not_before)
    assert response.status == 202, response.body
    view = response.json()
    assert (view["state"], view["seq"], view["not_before"]) == ("queued", 1, 0)


@pytest.mark.parametrize("not_before", [
    "\uff12\uff10\uff13\uff10-01-01T09:00:00Z",  # fullwidth digits
    "2030-01-01T09:00:00+\u0660\u0662:00",        # Arabic-Indic digits in the offset
    "\u0968\u0966\u0969\u0966-01-01T09:00:00Z",  # Devanagari digits
    "2023-11-14T22:14:50.\u0661\u0662\u0663Z",     # Arabic-Indic digits in the fraction
])
def test_a_date_time_with_digits_other_than_ascii_is_refused_naming_the_field(
    api: Api, not_before: str
) -> None:
    before = api.dump()
    response = api.submit("t1", {"text": "x"}, agent="echo", not_before=not_before)
    assert response.status == 422, response.body
    problem = response.json()
    assert problem["field"] == "not_before", problem
    assert "RFC 3339" in problem["detail"], problem
    assert api.dump() == before


@pytest.mark.parametrize("not_before", [
    "1969-12-31T23:59:59Z", "\uff12\uff10\uff13\uff10-01-01T09:00:00Z", "2030-02-30T00:00:00Z",
    "0000-01-01T00:00:00Z", -1, 2**53, 1.5, True, "soon",
])
def test_the_model_gives_one_error_for_not_before(not_before: Any) -> None:
    try:
        SubmitRequest.model_validate({"input": 1, "not_before": not_before})
    except ValidationError as exc:
        assert exc.error_count() == 1, exc.errors()
        assert exc.errors()[0]["loc"] == ("not_before",)
