"""Submission detail, approvals, abort and resolve over HTTP, with the runtime driven directly."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api, make_api

from threadline import Application, ManualClock, Turn
from threadline.api.models import SubmissionDetail
from threadline.errors import Evicted


def _submit(api: Api, thread: str, text: str, agent: str) -> str:
    response = api.submit(thread, {"text": text}, agent=agent)
    assert response.status == 202
    return str(response.json()["id"])


def _get(api: Api, thread: str, sub: str) -> dict[str, Any]:
    response = api.call("GET", api.submission_path(thread, sub))
    assert response.status == 200
    return dict(response.json())


def test_an_echo_run_shows_its_outcome_attempts_and_journal(api: Api) -> None:
    sub = _submit(api, "t1", "hello", "echo")
    queued = _get(api, "t1", sub)
    assert queued["state"] == "queued" and queued["attempts"] == 0
    assert queued["journal"] == {"steps": 0, "finished": 0, "failed": 0, "in_flight": 0,
                                 "entries": []}
    api.drive()
    done = _get(api, "t1", sub)
    assert (done["state"], done["outcome"], done["result"]) == ("settled", "completed",
                                                                {"text": "hello"})
    assert done["attempts"] == 1 and done["settled_at"] is not None and done["error"] is None
    assert done["journal"]["steps"] == 1 and done["journal"]["finished"] == 1
    assert [(e["key"], e["effect"], e["state"]) for e in done["journal"]["entries"]] == [
        ("step:echo", "idempotent", "finished")]
    assert done["waits"] == [] and done["abort"] is None


def test_a_submission_of_another_thread_is_404(api: Api) -> None:
    sub = _submit(api, "t1", "hello", "echo")
    for method, suffix, body in [("GET", "", None), ("POST", "/abort", {}),
                                 ("POST", "/approvals/confirm", {"approved": True}),
                                 ("POST", "/resolve", {"action": "retry"})]:
        before = api.dump()
        kwargs = {} if body is None else {"json_body": body}
        response = api.call(method, api.submission_path("t2", sub) + suffix, **kwargs)
        assert response.status == 404, suffix
        assert response.json()["field"] == "submission"
        assert api.dump() == before
    missing = api.call("GET", api.submission_path("t1", "sub_nope"))
    assert missing.status == 404 and missing.json()["type"] == "urn:threadline:problem:not-found"


@pytest.mark.parametrize("approved", [True, False])
def test_the_confirm_flow_over_http(api: Api, clock: ManualClock, approved: bool) -> None:
    sub = _submit(api, "t1", "ship it", "confirm")
    api.drive()
    waiting = _get(api, "t1", sub)
    assert waiting["state"] == "suspended"
    assert [(w["kind"], w["key"], w["state"], w["payload"]) for w in waiting["waits"]] == [
        ("approval", "confirm", "open", {"text": "ship it"})]
    clock.advance(10)
    api.storage.delete_alarm()  # as a pass leaves it when only a stable wait remains
    decided = api.call("POST", api.submission_path("t1", sub) + "/approvals/confirm",
                       {"approved": approved, "payload": {"by": "ops"}})
    assert decided.status == 200
    assert decided.json() == {"submission_id": sub, "key": "confirm", "approved": approved,
                              "payload": {"by": "ops"}, "state": "ready"}
    # Deciding made the head runnable: the prompt-pass hint brought the alarm to now, not to
    # the crash fallback a minimum delay away.
    assert api.storage.known_alarm() == clock.now_ms()
    api.drive()
    done = _get(api, "t1", sub)
    assert done["outcome"] == "completed" and done["result"] == {"approved": approved}
    assert done["waits"][0]["state"] == "resolved"
    assert done["waits"][0]["decision"] == {"approved": approved, "payload": {"by": "ops"}}
    records = api.call("GET", api.thread_path("t1") + "/history").json()["records"]
    said = [r["body"] for r in records if r["submission_id"] == sub and r["kind"] == "record"]
    assert said == ([{"role": "assistant", "text": "ship it"}] if approved else [])
    # The runtime's own records frame it: the request first, the settlement last.
    kinds = [r["kind"] for r in records if r["submission_id"] == sub]
    assert kinds[0] == "approval.requested" and kinds[-1] == "submission.settled"


def test_an_approval_decided_twice(api: Api) -> None:
    sub = _submit(api, "t1", "x", "confirm")
    api.drive()
    path = api.submission_path("t1", sub) + "/approvals/confirm"
    assert api.call("POST", path, {"approved": True}).status == 200
    before = api.dump()
    same = api.call("POST", path, {"approved": True})
    assert same.status == 200 and same.json()["approved"] is True
    other = api.call("POST", path, {"approved": False})
    assert other.status == 409 and other.json()["field"] == "key"
    unknown = api.call("POST", api.submission_path("t1", sub) + "/approvals/other",
                       {"approved": True})
    assert unknown.status == 404 and unknown.json()["field"] == "key"
    assert api.dump() == before


def test_abort_of_a_queued_submission_settles_it_with_the_reason(api: Api) -> None:
    sub = _submit(api, "t1", "x", "echo")
    response = api.call("POST", api.submission_path("t1", sub) + "/abort", {"reason": "typo"})
    assert response.status == 200
    body = response.json()
    assert (body["state"], body["outcome"]) == ("settled", "aborted")
    assert body["abort"]["reason"] == "typo" and body["abort"]["state"] in ("accepted", "applied")
    assert body["error"]["message"] == "typo"


def test_abort_without_a_body_and_again_after_settlement(api: Api) -> None:
    sub = _submit(api, "t1", "x", "echo")
    path = api.submission_path("t1", sub) + "/abort"
    assert api.call("POST", path).json()["outcome"] == "aborted"
    before = api.dump()
    again = api.call("POST", path, {"reason": "twice"})
    assert again.status == 200 and again.json()["outcome"] == "aborted"
    assert api.dump() == before


def test_abort_of_a_suspended_submission_frees_the_next(api: Api) -> None:
    first = _submit(api, "t1", "x", "confirm")
    second = _submit(api, "t1", "y", "echo")
    api.drive()
    assert _get(api, "t1", second)["state"] == "queued"  # FIFO behind the suspended head
    assert api.call("POST", api.submission_path("t1", first) + "/abort").status == 200
    api.drive()
    assert _get(api, "t1", first)["outcome"] == "aborted"
    assert _get(api, "t1", second)["outcome"] == "completed"


def _with_mail(app: Application) -> None:
    @app.agent("mail")
    async def mail(turn: Turn) -> Any:
        sent = await turn.step("send", lambda: "sent", effect="uncertain")
        return {"sent": sent}


def _unknown(clock: ManualClock) -> tuple[Api, str]:
    api = make_api(clock, _with_mail)
    sub = api.submit("t1", None, agent="mail").json()["id"]
    api.failpoints.evict_at("step:started")
    with pytest.raises(Evicted):
        api.drive()
    api.build()  # the object is lost with its Attempt in flight
    clock.advance(api.app.config.lease_ms)
    api.drive()
    detail = _get(api, "t1", sub)
    assert detail["state"] == "unknown"
    assert detail["journal"]["in_flight"] == 1
    assert [(w["kind"], w["state"]) for w in detail["waits"]] == [("unknown", "open")]
    return api, str(sub)


@pytest.mark.parametrize(
    ("resolution", "outcome", "result"),
    [
        ({"action": "accept", "result": "delivered"}, "completed", {"sent": "delivered"}),
        ({"action": "accept", "result": None}, "completed", {"sent": None}),
        ({"action": "retry"}, "completed", {"sent": "sent"}),
        ({"action": "abort"}, "aborted", None),
    ],
)
def test_resolving_an_unknown_outcome(
    clock: ManualClock, resolution: dict[str, Any], outcome: str, result: Any
) -> None:
    api, sub = _unknown(clock)
    path = api.submission_path("t1", sub) + "/resolve"
    response = api.call("POST", path, resolution)
    assert response.status == 200
    api.drive()
    done = _get(api, "t1", sub)
    assert (done["outcome"], done["result"]) == (outcome, result)
    before = api.dump()
    again = api.call("POST", path, resolution)
    assert again.status == 409 and again.json()["type"] == "urn:threadline:problem:conflict"
    assert api.dump() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "accept"}, "result"),
        ({"action": "retry", "result": 1}, "result"),
        ({"action": "abort", "result": None}, "result"),
        ({"action": "later"}, "action"),
        ({}, "action"),
        ({"action": "retry", "extra": 1}, "extra"),
    ],
)
def test_bad_resolutions_are_422_and_write_nothing(
    clock: ManualClock, body: dict[str, Any], field: str
) -> None:
    api, sub = _unknown(clock)
    before = api.dump()
    response = api.call("POST", api.submission_path("t1", sub) + "/resolve", body)
    assert response.status == 422
    assert response.json()["field"] == field and field in response.json()["detail"]
    assert api.dump() == before


def test_resolving_a_submission_that_is_not_unknown_is_409(api: Api) -> None:
    sub = _submit(api, "t1", "x", "echo")
    before = api.dump()
    response = api.call("POST", api.submission_path("t1", sub) + "/resolve", {"action": "retry"})
    assert response.status == 409
    assert api.dump() == before


def _nest(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_json_round_trips_up_to_the_runtime_depth_limit_and_not_past_it(
    clock: ManualClock,
) -> None:
    """The runtime's ``max_json_depth`` bounds every stored value: an input at the limit
    round-trips, one level more is a 422 naming the limit, and a deeper result fails its
    Attempt for good instead of being stored."""

    def extend(app: Application) -> None:
        @app.agent("deep")
        async def deep(turn: Turn) -> Any:
            return _nest(400)

    api = make_api(clock, extend)
    limit = api.app.config.max_json_depth
    sub = api.submit("t1", _nest(limit), agent="deep")
    assert sub.status == 202 and sub.json()["input"] == _nest(limit)
    refused = api.submit("t1", _nest(limit + 1), agent="deep")
    assert refused.status == 422
    assert refused.json()["field"] == "input" and refused.json()["limit"] == "max_json_depth"
    api.drive()
    done = _get(api, "t1", sub.json()["id"])
    assert done["outcome"] == "failed" and done["result"] is None
    assert done["error"]["type"] == "NonRetryable"


def test_plain_rendering_equals_pydantic_json_mode(api: Api) -> None:
    from threadline.api.http import plain
    from threadline.api.models import MaintenanceView

    sub = _submit(api, "t1", "x", "confirm")
    api.drive()
    detail = api.call("GET", api.submission_path("t1", sub)).json()
    model = SubmissionDetail.model_validate(detail)
    assert plain(model) == model.model_dump(mode="json") == detail
    report = MaintenanceView.model_validate(
        {**api.call("GET", "/v1/spaces/acme/maintenance").json(),
         "faults": [{"thread_id": "t", "attempts": 1, "first_failed_at": 1, "last_failed_at": 1,
                     "retry_at": None, "failure": None, "extra_member": [1]}]})
    assert plain(report) == report.model_dump(mode="json")


def test_abort_of_a_running_submission_is_durable_at_once_and_observed_later(api: Api) -> None:
    import asyncio

    from threadline.api.http import Request

    sub = _submit(api, "t1", "x", "echo")
    gate = api.failpoints.block_at("step:started")

    async def scenario() -> tuple[dict[str, Any], Any]:
        attempt = asyncio.create_task(api.space.runtime.process_thread_head("t1"))
        while api.failpoints.hits("step:started") == 0:
            await asyncio.sleep(0)
        request = Request.from_url("POST", api.submission_path("t1", sub) + "/abort",
                                   body=b'{"reason": "stop"}')
        answer = (await api.space.handle(request)).json()
        gate.release()
        return answer, await attempt

    answer, settlement = asyncio.run(scenario())
    assert answer["state"] == "running" and answer["abort"]["state"] == "accepted"
    assert settlement is not None and settlement.outcome.value == "aborted"
    assert _get(api, "t1", sub)["outcome"] == "aborted"
