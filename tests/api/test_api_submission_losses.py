"""The submission detail says when an Attempt was lost to a reset, and counts the losses."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api, make_api

from threadline import Application, ManualClock, Turn
from threadline.errors import Evicted


def _with_fragile(app: Application) -> None:
    @app.agent("fragile")
    async def fragile(turn: Turn) -> Any:
        await turn.step("first", lambda: "ok")
        return await turn.step("second", lambda: "ok")


def _detail(api: Api, sub: str) -> dict[str, Any]:
    response = api.call("GET", api.submission_path("t1", sub))
    assert response.status == 200
    return dict(response.json())


def test_the_detail_route_shows_the_cause_as_lost_to_a_reset(clock: ManualClock) -> None:
    api = make_api(clock, _with_fragile)
    sub = str(api.submit("t1", None, agent="fragile").json()["id"])
    assert _detail(api, sub)["losses"] == {"total": 0, "in_a_row": 0, "position": None,
                                           "last_cause": None}
    # The object is reset while the second step runs (its first has finished).
    api.failpoints.evict_at("step:started", after=1)
    with pytest.raises(Evicted):
        api.drive()
    api.build()
    api.space.runtime.run_recovery("t1")

    lost = _detail(api, sub)
    assert lost["state"] == "ready" and lost["attempts"] == 1
    assert lost["error"] == {
        "type": "AttemptLost", "cause": "reset", "attempt": 1, "in_a_row": 1, "position": 1,
        "message": "the Attempt was lost to a reset of the object (a deploy, an eviction or a"
                   " crash) before it settled; retried without spending max_attempts",
    }
    assert lost["losses"] == {"total": 1, "in_a_row": 1, "position": 1, "last_cause": "reset"}

    api.drive()
    done = _detail(api, sub)
    assert (done["outcome"], done["attempts"], done["error"]) == ("completed", 2, None)
    # Settled, the submission still says what happened to it on the way; the Attempt that
    # completed ended the streak, so none of those losses is in a row any more.
    assert done["losses"] == {"total": 1, "in_a_row": 0, "position": 1, "last_cause": "reset"}
