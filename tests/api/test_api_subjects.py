"""Who did it: the subject the Worker names (``threadline-subject``) is recorded on what the
request causes, shown in the submission detail and named in the Thread log's records."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import Api, make_api

from threadline import Application, ManualClock, Turn
from threadline.access import SUBJECT_HEADER
from threadline.errors import Evicted


def _as(subject: str | None) -> dict[str, str]:
    return {} if subject is None else {SUBJECT_HEADER: subject}


def _submit(api: Api, thread: str, agent: str, subject: str | None = None,
            **fields: Any) -> str:
    response = api.call("POST", api.thread_path(thread) + "/submissions",
                        {"input": {"text": "x"}, "agent": agent, **fields},
                        headers=_as(subject))
    assert response.status == 202, response.json()
    return str(response.json()["id"])


def _detail(api: Api, thread: str, sub: str) -> dict[str, Any]:
    response = api.call("GET", api.submission_path(thread, sub))
    assert response.status == 200
    return dict(response.json())


def _records(api: Api, thread: str, sub: str) -> dict[str, dict[str, Any]]:
    records = api.call("GET", api.thread_path(thread) + "/history").json()["records"]
    return {r["kind"]: r["body"] for r in records
            if r["submission_id"] == sub and r["kind"] != "record"}


def test_the_submitter_is_shown_in_the_detail_and_named_in_the_settled_record(api: Api) -> None:
    sub = _submit(api, "t1", "echo", "user:alice")
    assert _detail(api, "t1", sub)["submitted_by"] == "user:alice"
    api.drive()
    done = _detail(api, "t1", sub)
    assert (done["outcome"], done["submitted_by"]) == ("completed", "user:alice")
    assert _records(api, "t1", sub)["submission.settled"] == {
        "submission_id": sub, "outcome": "completed", "result": {"text": "x"},
        "submitted_by": "user:alice"}


def test_the_submit_answer_names_the_submitter_and_a_replay_keeps_the_first(api: Api) -> None:
    first = api.call("POST", api.thread_path("t1") + "/submissions",
                     {"input": 1, "agent": "echo", "idempotency_key": "k"},
                     headers=_as("user:alice"))
    assert first.status == 202 and first.json()["submitted_by"] == "user:alice"
    again = api.call("POST", api.thread_path("t1") + "/submissions",
                     {"input": 1, "agent": "echo", "idempotency_key": "k"},
                     headers=_as("user:bob"))
    assert again.status == 200 and again.json()["submitted_by"] == "user:alice"


def test_without_the_header_every_subject_is_null_and_no_record_names_one(
    api: Api, clock: ManualClock
) -> None:
    sub = _submit(api, "t1", "confirm")
    api.drive()
    path = api.submission_path("t1", sub)
    assert api.call("POST", path + "/approvals/confirm", {"approved": True}).status == 200
    api.drive()
    other = _submit(api, "t1", "echo")
    assert api.call("POST", api.submission_path("t1", other) + "/abort").status == 200
    done, aborted = _detail(api, "t1", sub), _detail(api, "t1", other)
    assert done["submitted_by"] is None and done["waits"][0]["decided_by"] is None
    assert aborted["submitted_by"] is None and aborted["abort"]["requested_by"] is None
    assert _records(api, "t1", sub) == {
        "approval.requested": {"submission_id": sub, "key": "confirm",
                               "payload": {"text": "x"}},
        "approval.decided": {"submission_id": sub, "key": "confirm", "approved": True},
        "submission.settled": {"submission_id": sub, "outcome": "completed",
                               "result": {"approved": True}},
    }
    assert _records(api, "t1", other)["submission.settled"] == {
        "submission_id": other, "outcome": "aborted",
        "error": {"type": "Aborted", "message": "aborted"}}


@pytest.mark.parametrize("approved", [True, False])
def test_the_approver_is_shown_on_the_wait_and_logged_with_the_decision(
    api: Api, approved: bool
) -> None:
    sub = _submit(api, "t1", "confirm", "user:alice")
    api.drive()
    decided = api.call("POST", api.submission_path("t1", sub) + "/approvals/confirm",
                       {"approved": approved}, headers=_as("ops:carol"))
    assert decided.status == 200
    wait = _detail(api, "t1", sub)["waits"][0]
    assert (wait["state"], wait["decided_by"]) == ("resolved", "ops:carol")
    records = api.call("GET", api.thread_path("t1") + "/history").json()["records"]
    kinds = [r["kind"] for r in records if r["submission_id"] == sub]
    assert kinds == ["approval.requested", "approval.decided"]
    decision = next(r for r in records if r["kind"] == "approval.decided")
    assert decision["record_id"] == f"{sub}:approval:confirm:decided"
    assert decision["body"] == {"submission_id": sub, "key": "confirm", "approved": approved,
                                "decided_by": "ops:carol"}
    # The same decision again, by anyone, changes nothing and logs nothing more.
    before = api.dump()
    again = api.call("POST", api.submission_path("t1", sub) + "/approvals/confirm",
                     {"approved": approved}, headers=_as("ops:dave"))
    assert again.status == 200 and api.dump() == before


def test_the_settled_record_of_an_aborted_submission_names_who_aborted(api: Api) -> None:
    sub = _submit(api, "t1", "echo", "user:alice")
    response = api.call("POST", api.submission_path("t1", sub) + "/abort", {"reason": "typo"},
                        headers=_as("ops:carol"))
    assert response.status == 200
    assert response.json()["abort"]["requested_by"] == "ops:carol"
    assert _records(api, "t1", sub)["submission.settled"] == {
        "submission_id": sub, "outcome": "aborted",
        "error": {"type": "Aborted", "message": "typo"},
        "submitted_by": "user:alice", "aborted_by": "ops:carol"}


def test_a_delayed_submission_keeps_its_submitter_when_it_falls_due_or_is_aborted(
    api: Api, clock: ManualClock
) -> None:
    later = clock.now_ms() + 60_000
    due = _submit(api, "t1", "echo", "user:alice", not_before=later)
    dropped = _submit(api, "t1", "echo", "user:bob", not_before=later)
    assert _detail(api, "t1", due)["submitted_by"] == "user:alice"
    aborted = api.call("POST", api.submission_path("t1", dropped) + "/abort",
                       headers=_as("ops:carol")).json()
    assert (aborted["outcome"], aborted["submitted_by"]) == ("aborted", "user:bob")
    assert aborted["abort"]["requested_by"] == "ops:carol"
    assert _records(api, "t1", dropped)["submission.settled"]["aborted_by"] == "ops:carol"
    clock.advance(60_000)
    api.space.runtime.ledger.admit_due(clock.now_ms(), 10)
    api.drive()
    done = _detail(api, "t1", due)
    assert (done["outcome"], done["submitted_by"]) == ("completed", "user:alice")
    assert _records(api, "t1", due)["submission.settled"]["submitted_by"] == "user:alice"


def _with_mail(app: Application) -> None:
    @app.agent("mail")
    async def mail(turn: Turn) -> Any:
        sent = await turn.step("send", lambda: "sent", effect="uncertain")
        return {"sent": sent}


def _unknown(clock: ManualClock) -> tuple[Api, str]:
    api = make_api(clock, _with_mail)
    sub = _submit(api, "t1", "mail", "user:alice")
    api.failpoints.evict_at("step:started")
    with pytest.raises(Evicted):
        api.drive()
    api.build()
    clock.advance(api.app.config.lease_ms)
    api.drive()
    assert _detail(api, "t1", sub)["state"] == "unknown"
    return api, sub


@pytest.mark.parametrize("resolution", [{"action": "accept", "result": "ok"}, {"action": "retry"}])
def test_who_resolved_an_unknown_outcome_is_shown_on_its_wait(
    clock: ManualClock, resolution: dict[str, Any]
) -> None:
    api, sub = _unknown(clock)
    response = api.call("POST", api.submission_path("t1", sub) + "/resolve", resolution,
                        headers=_as("ops:carol"))
    assert response.status == 200
    [wait] = response.json()["waits"]
    assert (wait["kind"], wait["state"], wait["decided_by"]) == (
        "unknown", "resolved", "ops:carol")
    api.drive()
    settled = _records(api, "t1", sub)["submission.settled"]
    assert settled["outcome"] == "completed" and settled["submitted_by"] == "user:alice"
    assert "resolved_by" not in settled  # the settlement came of the run, not the resolution


def test_an_unknown_outcome_resolved_by_abort_names_who_resolved_it(clock: ManualClock) -> None:
    api, sub = _unknown(clock)
    response = api.call("POST", api.submission_path("t1", sub) + "/resolve",
                        {"action": "abort"}, headers=_as("ops:carol"))
    assert response.status == 200
    detail = response.json()
    assert detail["outcome"] == "aborted" and detail["abort"]["requested_by"] == "ops:carol"
    [wait] = detail["waits"]
    assert (wait["state"], wait["decision"], wait["decided_by"]) == (
        "resolved", {"action": "abort", "result": None}, "ops:carol")
    settled = _records(api, "t1", sub)["submission.settled"]
    assert (settled["submitted_by"], settled["aborted_by"], settled["resolved_by"]) == (
        "user:alice", "ops:carol", "ops:carol")


_ROUTES = [
    ("/submissions", {"input": 1, "agent": "echo"}),
    ("/submissions/{sub}/abort", {}),
    ("/submissions/{sub}/approvals/confirm", {"approved": True}),
    ("/submissions/{sub}/resolve", {"action": "retry"}),
]


@pytest.mark.parametrize("value", ["", "a" * 257, "line\nbreak", "tab\there", "nul\x00"])
@pytest.mark.parametrize(("suffix", "body"), _ROUTES)
def test_an_invalid_subject_header_is_400_and_writes_nothing(
    api: Api, value: str, suffix: str, body: dict[str, Any]
) -> None:
    sub = _submit(api, "t1", "confirm", "user:alice")
    api.drive()
    before = api.dump()
    response = api.call("POST", api.thread_path("t1") + suffix.format(sub=sub), body,
                        headers={SUBJECT_HEADER: value})
    assert response.status == 400
    problem = response.json()
    assert problem["type"] == "urn:threadline:problem:invalid-header"
    assert problem["field"] == SUBJECT_HEADER
    assert api.dump() == before


def test_a_subject_of_256_printable_characters_is_recorded_as_given(api: Api) -> None:
    subject = "ü" + "s" * 254 + "!"
    sub = _submit(api, "t1", "echo", subject)
    assert _detail(api, "t1", sub)["submitted_by"] == subject


def test_an_abort_observed_after_a_lost_attempt_still_names_who_aborted(
    api: Api, clock: ManualClock
) -> None:
    sub = _submit(api, "t1", "echo", "user:alice")
    api.failpoints.evict_at("step:started")
    with pytest.raises(Evicted):
        api.drive()
    api.build()  # the Attempt is lost while it runs: the abort has to wait for its lease
    asked = api.call("POST", api.submission_path("t1", sub) + "/abort", {"reason": "stop"},
                     headers=_as("ops:carol")).json()
    assert (asked["state"], asked["abort"]["state"]) == ("running", "accepted")
    assert "submission.settled" not in _records(api, "t1", sub)
    clock.advance(api.app.config.lease_ms)
    api.drive()
    assert _records(api, "t1", sub)["submission.settled"] == {
        "submission_id": sub, "outcome": "aborted",
        "error": {"type": "Aborted", "message": "stop"},
        "submitted_by": "user:alice", "aborted_by": "ops:carol"}
