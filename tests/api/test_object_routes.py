import asyncio

from threadline import Application, ManualClock, RuntimeConfig, Space, SqliteStorage
from threadline.api.http import Request
from threadline.api.problems import PROBLEM_CONTENT_TYPE
from threadline.storage import SCHEMA_VERSION


def _space(clock: ManualClock) -> Space:
    space = Space(Application(), SqliteStorage(":memory:"), clock=clock)
    asyncio.run(space.start())
    return space


def test_start_migrates_and_health_answers(clock: ManualClock) -> None:
    space = _space(clock)
    response = asyncio.run(space.handle(Request.from_url("GET", "https://x/v1/health")))
    assert response.status == 200
    assert response.json() == {"status": "ok", "schema_version": SCHEMA_VERSION}


def test_unknown_routes_are_problem_404s(clock: ManualClock) -> None:
    space = _space(clock)
    request = Request.from_url("POST", "https://x/v1/spaces/s/threads/t/replies", body=b"{}")
    response = asyncio.run(space.handle(request))
    assert response.status == 404
    assert response.headers["content-type"] == PROBLEM_CONTENT_TYPE
    problem = response.json()
    assert problem["status"] == 404 and problem["type"] == "urn:threadline:problem:not-found"


def test_alarm_leaves_the_slot_at_the_earliest_due_lane(clock: ManualClock) -> None:
    space = _space(clock)
    storage = space.storage
    now = clock.now_ms()
    storage.exec("INSERT INTO tl_lanes (id, due_at, state) VALUES ('a', ?, 'due')", now + 5_000)
    storage.exec("INSERT INTO tl_lanes (id, due_at, state) VALUES ('b', ?, 'due')", now - 10)
    asyncio.run(space.alarm())
    # 'b' has no handler: its wave is charged and backed off, so 'a' or b's backoff is next.
    b = space.scheduler.due_queue.get("b")
    assert b is not None and b.stalls == 1 and b.due_at is not None
    min_delay = RuntimeConfig().min_alarm_delay_ms
    assert storage.known_alarm() == max(now + min_delay, min(now + 5_000, b.due_at))
    storage.exec("UPDATE tl_lanes SET due_at = NULL, state = 'idle'")
    asyncio.run(space.alarm())
    assert storage.known_alarm() is None
