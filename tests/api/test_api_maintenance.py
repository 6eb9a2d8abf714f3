"""GET /v1/spaces/{space}/maintenance: lanes, generation, alarm and the extension points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from api_support import Api, run

from threadline import ManualClock


def test_the_report_shows_the_native_lane_generation_and_alarm(
    api: Api, clock: ManualClock
) -> None:
    path = f"/v1/spaces/{api.space_id}/maintenance"
    idle = api.call("GET", path).json()
    # A new object owes a first pass (its schema and its agent registry are new): dirty work
    # that no pass has processed yet.
    assert idle["generation"]["dirty"] > idle["generation"]["processed"] == 0
    assert idle["generation"]["caught_up"] is False
    api.submit("t1", {"text": "x"}, agent="echo")
    report = api.call("GET", path)
    assert report.status == 200
    body = report.json()
    lanes = {lane["id"]: lane for lane in body["lanes"]}
    assert lanes["threadline:native"]["state"] == "due"
    assert lanes["threadline:native"]["due_at"] == clock.now_ms()
    assert body["generation"]["dirty"] > idle["generation"]["dirty"]
    assert body["alarm"] == clock.now_ms()
    assert body["faults"] == [] and body["binding_waits"] == [] and body["pass_reports"] == []


class _Sources:
    def faults(self) -> Sequence[Mapping[str, Any]]:
        return [{"thread_id": "t1", "attempts": 2, "first_failed_at": 1, "last_failed_at": 2,
                 "retry_at": 5_000, "failure": {"type": "Boom"}, "recipients": ["sub_1"]}]

    def binding_waits(self) -> Sequence[Mapping[str, Any]]:
        return [{"submission_id": "sub_1", "thread_id": "t1", "agent": "gone", "since": 3}]

    def pass_reports(self) -> Sequence[Mapping[str, Any]]:
        return [{"phase": "caught-up", "alarm": "cleared", "recovered": 0, "settled": 0,
                 "nonterminal": 0, "rows_read": 1, "rows_written": 1, "duration_ms": 0}]

    def schedules(self) -> Sequence[Mapping[str, Any]]:
        return []

    def host_lanes(self) -> Sequence[Mapping[str, Any]]:
        return [{"id": "mirror", "phase": "concurrent", "dispatch_timeout_ms": 1,
                 "state": "idle", "due_at": None, "stalls": 0}]

    def subscribers(self) -> Sequence[Mapping[str, Any]]:
        return []


def test_the_maintenance_package_fills_faults_binding_waits_and_pass_reports(api: Api) -> None:
    api.space.api = replace(api.space.api, maintenance=_Sources())
    body = api.call("GET", f"/v1/spaces/{api.space_id}/maintenance").json()
    assert body["faults"][0]["thread_id"] == "t1"
    assert body["faults"][0]["recipients"] == ["sub_1"]  # extra members pass through
    assert body["binding_waits"][0]["agent"] == "gone"
    assert body["pass_reports"][0]["phase"] == "caught-up"
    assert body["host_lanes"][0]["id"] == "mirror"


def test_the_report_shows_the_objects_own_faults_binding_waits_and_pass_reports(
    api: Api, clock: ManualClock
) -> None:
    """A Space wires the maintenance package's readout into the report."""
    path = f"/v1/spaces/{api.space_id}/maintenance"
    parked = api.space.runtime.ledger.admit("t9", "gone", {"text": "x"}).submission
    echoed = api.submit("t1", {"text": "x"}, agent="echo").json()["id"]
    run(api.space.alarm())
    api.space.faults.record("t7", failure="disk on fire", error_type="StorageError",
                            recipients=["sub_x"])
    body = api.call("GET", path).json()
    assert [(w["submission_id"], w["thread_id"], w["agent"]) for w in body["binding_waits"]] == [
        (parked.id, "t9", "gone")]
    assert [(f["thread_id"], f["failure"], f["recipients"]) for f in body["faults"]] == [
        ("t7", "disk on fire", ["sub_x"])]
    newest = body["pass_reports"][0]
    assert newest["phase"] == "actionable" and newest["settled"] >= 1
    assert newest["alarm"] in ("rearmed", "cleared") and newest["started_at"] <= clock.now_ms()
    done = api.call("GET", api.submission_path("t1", echoed)).json()
    assert done["state"] == "settled"
