"""POST .../submissions: admission, Location, replay, key reuse, agent choice, prompt wake."""

from __future__ import annotations

import pytest
from api_support import Api, make_api

from threadline import Application, ManualClock, Turn


def test_submit_admits_with_202_and_a_location(api: Api) -> None:
    response = api.submit("t1", {"text": "hi"}, agent="echo")
    assert response.status == 202
    body = response.json()
    assert body["state"] == "queued" and body["seq"] == 1 and body["agent"] == "echo"
    assert body["input"] == {"text": "hi"} and body["thread_id"] == "t1"
    assert response.headers["location"] == api.submission_path("t1", body["id"])
    second = api.submit("t1", {"text": "again"}, agent="echo").json()
    assert second["seq"] == 2 and second["id"] != body["id"]


def test_the_location_answers_with_the_submission(api: Api) -> None:
    response = api.submit("t1", {"text": "hi"}, agent="echo")
    detail = api.call("GET", response.headers["location"])
    assert detail.status == 200 and detail.json()["id"] == response.json()["id"]


def test_an_idempotent_replay_is_200_and_writes_nothing(api: Api) -> None:
    first = api.submit("t1", {"text": "hi"}, agent="echo", idempotency_key="k-1")
    assert first.status == 202
    before = api.dump()
    again = api.submit("t1", {"text": "hi"}, agent="echo", idempotency_key="k-1")
    assert again.status == 200
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert api.dump() == before


def test_a_key_reused_with_other_input_is_409_and_writes_nothing(api: Api) -> None:
    api.submit("t1", {"text": "hi"}, agent="echo", idempotency_key="k-1")
    before = api.dump()
    response = api.submit("t1", {"text": "other"}, agent="echo", idempotency_key="k-1")
    assert response.status == 409
    problem = response.json()
    assert problem["type"] == "urn:threadline:problem:conflict"
    assert problem["field"] == "idempotency_key" and "idempotency key" in problem["detail"]
    assert api.dump() == before
    # The same key in another Thread is another submission.
    assert api.submit("t2", {"text": "other"}, agent="echo", idempotency_key="k-1").status == 202


def test_the_thread_keeps_its_agent_when_none_is_named(api: Api) -> None:
    api.submit("t1", {"text": "hi"}, agent="confirm")
    follow_up = api.submit("t1", {"text": "and this"})
    assert follow_up.status == 202 and follow_up.json()["agent"] == "confirm"


def test_a_new_thread_without_agent_needs_one_when_several_are_registered(api: Api) -> None:
    before = api.dump()
    response = api.submit("t1", {"text": "hi"})
    assert response.status == 422
    problem = response.json()
    assert problem["field"] == "agent"
    assert "confirm" in problem["detail"] and "echo" in problem["detail"]
    assert api.dump() == before


def test_the_only_agent_is_the_default(clock: ManualClock) -> None:
    app = Application()

    @app.agent("solo")
    async def solo(turn: Turn) -> int:
        return 1

    from api_support import Api as Driver

    api = Driver(app, clock)
    response = api.submit("t1", None)
    assert response.status == 202 and response.json()["agent"] == "solo"


def test_an_unregistered_agent_is_refused_without_writing(api: Api) -> None:
    before = api.dump()
    response = api.submit("t1", {"text": "hi"}, agent="ecoh")
    assert response.status == 422
    assert response.json()["field"] == "agent" and "'ecoh'" in response.json()["detail"]
    assert api.dump() == before


def test_admission_asks_for_a_prompt_pass(api: Api, clock: ManualClock) -> None:
    """The crash-fallback alarm is a minimum delay away; the hint brings it to now."""
    now = clock.now_ms()
    assert api.submit("t1", {"text": "hi"}, agent="echo").status == 202
    assert api.storage.known_alarm() == now


def test_an_admissions_wake_reads_no_lane(
    api: Api, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own commit made the native lane due now: the wake arms that without a read."""
    api.submit("t1", {"text": "first"}, agent="echo")
    api.storage.delete_alarm()
    reads: list[str] = []
    run = api.storage.exec

    def spy(sql: str, *params: object) -> object:
        if sql.lstrip().upper().startswith("SELECT"):
            reads.append(sql)
        return run(sql, *params)  # type: ignore[arg-type]

    monkeypatch.setattr(api.storage, "exec", spy)
    assert api.submit("t1", {"text": "second"}, agent="echo").status == 202
    assert api.storage.known_alarm() == clock.now_ms()
    assert not any("tl_lanes" in sql for sql in reads), reads


def test_the_wake_is_deferred_while_a_pass_runs_and_armed_when_it_ends(
    api: Api, clock: ManualClock
) -> None:
    now = clock.now_ms()
    with api.space.scheduler.alarm.wakes_deferred():
        assert api.submit("t1", {"text": "hi"}, agent="echo").status == 202
        # Under the running pass only the admission's own fallback alarm is written.
        assert api.storage.known_alarm() == now + api.app.config.min_alarm_delay_ms
    assert api.storage.known_alarm() == now


def test_a_replay_does_not_touch_the_alarm(api: Api, clock: ManualClock) -> None:
    api.submit("t1", {"text": "hi"}, agent="echo", idempotency_key="k")
    api.storage.delete_alarm()
    assert api.submit("t1", {"text": "hi"}, agent="echo", idempotency_key="k").status == 200
    assert api.storage.known_alarm() is None


def test_submissions_of_another_space_path_share_the_object(clock: ManualClock) -> None:
    """The object serves whatever space the Worker routed to it; Location follows the path."""
    api = make_api(clock)
    response = api.call("POST", "/v1/spaces/other/threads/t/submissions",
                        {"agent": "echo", "input": {"text": "x"}})
    assert response.headers["location"].startswith("/v1/spaces/other/threads/t/submissions/")


def test_a_replay_without_agent_keeps_the_first_agent(api: Api) -> None:
    first = api.submit("t1", {"text": "hi"}, agent="confirm", idempotency_key="k")
    api.submit("t1", {"text": "next"}, agent="echo")  # the Thread's last agent is now echo
    before = api.dump()
    again = api.submit("t1", {"text": "hi"}, idempotency_key="k")
    assert again.status == 200 and again.json()["id"] == first.json()["id"]
    assert api.dump() == before


def test_a_replay_is_answered_after_its_agent_is_unregistered(clock: ManualClock) -> None:
    api = make_api(clock)
    first = api.submit("t1", {"text": "hi"}, agent="confirm", idempotency_key="k").json()
    smaller = Application()

    @smaller.agent("echo")
    async def echo(turn: Turn) -> int:
        return 1

    api.app = smaller
    api.build()  # a deployment without confirm, over the same storage
    for fields in ({"agent": "confirm"}, {}):
        again = api.submit("t1", {"text": "hi"}, idempotency_key="k", **fields)
        assert again.status == 200 and again.json()["id"] == first["id"]
    other = api.submit("t1", {"text": "hi"}, agent="confirm", idempotency_key="k2")
    assert other.status == 422 and other.json()["field"] == "agent"
