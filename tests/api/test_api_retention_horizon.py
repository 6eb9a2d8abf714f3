"""A client resuming a stream or reading history from before what retention kept is told where
the kept records start, never handed a silent gap."""

from __future__ import annotations

from typing import Any

from api_support import Api, make_api, run
from sse_support import open_stream

from threadline import Application, ManualClock, Turn
from threadline.maintenance.retention_lane import prune_thread

DAY_MS = 86_400_000


def _chatty(app: Application) -> None:
    @app.agent("chatty")
    async def chatty(turn: Turn) -> Any:
        await turn.emit({"said": turn.input})
        return {"ok": True}


def _pruned(clock: ManualClock) -> tuple[Api, int]:
    """A Thread of five turns (ten records), the first three deleted by retention; the seq of
    the first record kept."""
    api = make_api(clock, _chatty)
    for index in range(5):
        assert api.submit("t1", index, agent="chatty").status == 202
        api.drive()
        if index == 2:
            clock.advance(40 * DAY_MS)
    cutoff = clock.now_ms() - 30 * DAY_MS
    api.storage.transaction(lambda: prune_thread(api.storage, "t1", cutoff))
    first = int(api.storage.exec(
        "SELECT MIN(seq) AS seq FROM tl_history WHERE thread_id = 't1'").one()["seq"])
    assert first == 7
    return api, first


def _history(api: Api, after: int) -> dict[str, Any]:
    reply = api.call("GET", api.thread_path("t1") + f"/history?after={after}")
    assert reply.status == 200, reply.body
    data: dict[str, Any] = reply.json()
    return data


def test_history_from_before_the_retained_records_names_the_first_kept(
    clock: ManualClock,
) -> None:
    api, first = _pruned(clock)
    page = _history(api, 0)
    assert page["first_kept"] == first
    assert [record["seq"] for record in page["records"]] == list(range(first, 11))
    # From the kept records on, nothing is missing and nothing is said.
    assert _history(api, first - 1)["first_kept"] is None
    assert _history(api, first + 1)["first_kept"] is None


def test_stream_resumed_before_the_retained_records_starts_with_a_horizon_event(
    clock: ManualClock,
) -> None:
    api, first = _pruned(clock)

    async def go() -> None:
        reader = await open_stream(api, "t1", last_event_id="2")
        horizon = await reader.next()
        assert horizon.event == "horizon" and horizon.id is None
        assert horizon.data == {"after": 2, "first_kept": first}
        record = await reader.next()
        assert record.event == "record" and record.id == first
        await reader.close()
        # Resumed at the kept records: records only.
        reader = await open_stream(api, "t1", after=first - 1)
        assert (await reader.next()).id == first
        await reader.close()

    run(go())
