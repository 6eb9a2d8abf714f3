"""A scheduled submission answers like any other: idempotent by key (200 with the same input,
409 with other input, whether the replay is delayed or not), abortable (settled ``aborted`` at
once, its id still answering), and not something to approve or resolve (409)."""

from __future__ import annotations

from api_support import Api

DUE = 1_700_000_000_000 + 90_000


def test_a_scheduled_submissions_key_replays_with_200_and_conflicts_with_409(api: Api) -> None:
    first = api.submit("t1", {"text": "x"}, agent="echo", idempotency_key="k", not_before=DUE)
    assert first.status == 202
    for later in (DUE, DUE + 1_000, None):
        fields = {} if later is None else {"not_before": later}
        again = api.submit("t1", {"text": "x"}, agent="echo", idempotency_key="k", **fields)
        assert again.status == 200, again.body
        assert again.json() == first.json()
        assert again.headers["location"] == first.headers["location"]
        other = api.submit("t1", {"text": "y"}, agent="echo", idempotency_key="k", **fields)
        assert other.status == 409 and other.json()["field"] == "idempotency_key"
    # No agent named: the replay keeps the scheduled submission's agent.
    assert api.submit("t1", {"text": "x"}, idempotency_key="k").status == 200
    summary = api.call("GET", api.thread_path("t1")).json()
    assert len(summary["scheduled"]) == 1 and summary["open"] == []


def test_a_scheduled_submission_is_aborted_at_once_and_cannot_be_approved_or_resolved(
    api: Api,
) -> None:
    sub = api.submit("t1", {"text": "x"}, agent="confirm", not_before=DUE).json()
    path = api.submission_path("t1", sub["id"])
    approve = api.call("POST", path + "/approvals/confirm", {"approved": True})
    assert approve.status == 409, approve.body
    resolve = api.call("POST", path + "/resolve", {"action": "retry"})
    assert resolve.status == 409, resolve.body
    aborted = api.call("POST", path + "/abort", {"reason": "not needed"})
    assert aborted.status == 200, aborted.body
    detail = aborted.json()
    assert (detail["state"], detail["outcome"], detail["seq"]) == ("settled", "aborted", 1)
    assert detail["error"] == {"type": "Aborted", "message": "not needed"}
    assert detail["abort"]["state"] == "applied"
    assert api.call("GET", path).json() == detail
    assert api.call("POST", path + "/abort", {}).json() == detail
    summary = api.call("GET", api.thread_path("t1")).json()
    assert summary["scheduled"] == [] and summary["open"] == []
    # Elsewhere its id is not found, as any submission's.
    assert api.call("GET", api.submission_path("t2", sub["id"])).status == 404
