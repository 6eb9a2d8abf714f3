"""Thread list, Thread summary and history paging over HTTP."""

from __future__ import annotations

from api_support import Api


def test_threads_are_listed_in_id_order_and_paged(api: Api) -> None:
    for thread in ["c", "a", "b"]:
        api.submit(thread, {"text": thread}, agent="echo")
    api.submit("a", {"text": "again"}, agent="echo")
    base = f"/v1/spaces/{api.space_id}/threads"
    first = api.call("GET", base + "?limit=2").json()
    assert [t["id"] for t in first["threads"]] == ["a", "b"] and first["next"] == "b"
    assert first["threads"][0]["submissions"] == 2 and first["threads"][0]["open_submissions"] == 2
    second = api.call("GET", base + "?limit=2&after=" + first["next"]).json()
    assert [t["id"] for t in second["threads"]] == ["c"] and second["next"] is None
    everything = api.call("GET", base).json()
    assert [t["id"] for t in everything["threads"]] == ["a", "b", "c"]
    assert everything["next"] is None


def test_an_exactly_full_last_page_has_no_next(api: Api) -> None:
    for thread in ["a", "b"]:
        api.submit(thread, {"text": thread}, agent="echo")
    page = api.call("GET", f"/v1/spaces/{api.space_id}/threads?limit=2").json()
    assert len(page["threads"]) == 2 and page["next"] is None


def test_an_empty_space_lists_no_threads(api: Api) -> None:
    response = api.call("GET", f"/v1/spaces/{api.space_id}/threads")
    assert response.status == 200 and response.json() == {"threads": [], "next": None}


def test_the_summary_shows_open_submissions_in_fifo_order(api: Api) -> None:
    first = api.submit("t1", {"text": "x"}, agent="confirm").json()["id"]
    second = api.submit("t1", {"text": "y"}, agent="echo").json()["id"]
    api.drive()
    summary = api.call("GET", api.thread_path("t1"))
    assert summary.status == 200
    body = summary.json()
    assert body["id"] == "t1" and body["submissions"] == 2 and body["open_submissions"] == 2
    assert [(s["id"], s["seq"], s["state"]) for s in body["open"]] == [
        (first, 1, "suspended"), (second, 2, "queued")]
    api.call("POST", api.submission_path("t1", first) + "/approvals/confirm", {"approved": True})
    api.drive()
    done = api.call("GET", api.thread_path("t1")).json()
    assert done["open"] == [] and done["open_submissions"] == 0
    # The last seq counts the runtime's records too: the approval request and its decision,
    # the confirmed reply, both settlements and the echo's reply.
    log = api.call("GET", api.thread_path("t1") + "/history").json()["records"]
    assert [(r["kind"], r["submission_id"]) for r in log] == [
        ("approval.requested", first), ("approval.decided", first), ("record", first),
        ("submission.settled", first), ("record", second), ("submission.settled", second)]
    assert done["history_seq"] == log[-1]["seq"] == 6


def test_a_named_thread_without_a_submission_reads_as_empty_and_writes_nothing(
    api: Api,
) -> None:
    api.submit("t1", {"text": "x"}, agent="echo")
    before = api.dump()
    written = api.storage.meter.reading()
    summary = api.call("GET", api.thread_path("fresh"))
    assert summary.status == 200, summary.body
    assert summary.json() == {
        "id": "fresh", "submissions": 0, "open_submissions": 0, "history_seq": 0,
        "created_at": None, "updated_at": None, "open": [], "scheduled": [],
    }
    history = api.call("GET", api.thread_path("fresh") + "/history?after=3")
    assert history.status == 200, history.body
    assert history.json() == {"thread_id": "fresh", "records": [], "next": None,
                              "first_kept": None}
    assert (api.storage.meter.reading() - written).rows_written == 0
    assert api.dump() == before
    # Only a Thread something was admitted to is listed.
    listed = api.call("GET", f"/v1/spaces/{api.space_id}/threads").json()
    assert [t["id"] for t in listed["threads"]] == ["t1"]


def test_history_pages_by_seq_with_a_next_cursor(api: Api) -> None:
    for text in ["one", "two", "three"]:
        api.submit("t1", {"text": text}, agent="echo")
    api.drive()
    path = api.thread_path("t1") + "/history"
    first = api.call("GET", path + "?limit=4").json()
    assert first["thread_id"] == "t1"
    # Each reply, then its submission's settlement record.
    assert [(r["seq"], r["kind"]) for r in first["records"]] == [
        (1, "record"), (2, "submission.settled"), (3, "record"), (4, "submission.settled")]
    assert [r["body"]["text"] for r in first["records"][::2]] == ["one", "two"]
    assert first["next"] == 4
    rest = api.call("GET", f"{path}?after={first['next']}&limit=4").json()
    assert [r["seq"] for r in rest["records"]] == [5, 6] and rest["next"] is None
    record, settled = rest["records"]
    assert record["body"] == {"role": "assistant", "text": "three"}
    assert record["record_id"].startswith(record["submission_id"])
    assert settled["record_id"] == f"{record['submission_id']}:settled"
    assert settled["body"] == {"submission_id": record["submission_id"],
                               "outcome": "completed", "result": settled["body"]["result"]}
    assert api.call("GET", path + "?after=6").json() == {"thread_id": "t1", "records": [],
                                                         "next": None, "first_kept": None}


def test_a_thread_without_records_has_an_empty_history(api: Api) -> None:
    api.submit("t1", {"text": "x"}, agent="echo")
    response = api.call("GET", api.thread_path("t1") + "/history")
    assert response.status == 200 and response.json()["records"] == []


def test_the_summary_lists_the_first_hundred_open_submissions(api: Api) -> None:
    ids = [api.submit("t1", {"text": str(n)}, agent="echo").json()["id"] for n in range(101)]
    body = api.call("GET", api.thread_path("t1")).json()
    assert body["open_submissions"] == 101
    assert [s["id"] for s in body["open"]] == ids[:100]
