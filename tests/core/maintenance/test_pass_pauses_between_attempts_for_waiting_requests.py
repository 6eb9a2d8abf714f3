"""A long pass awaits its pause port after starting each Attempt and between Attempts, so the
platform can deliver requests waiting for the object; what they admit meanwhile is served by
the same pass. The core's
default pause never suspends, so the pass is otherwise unchanged (and deterministic)."""

from __future__ import annotations

import asyncio
from contextvars import Context

from pass_support import Obj, echo_app, run

from threadline.clock import ManualClock
from threadline.storage import SqliteStorage
from threadline.threads.model import Submission, SubmissionState


def test_a_pass_pauses_between_attempts_and_serves_what_arrives_meanwhile(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    seen: list[int] = []
    arrived: list[Submission] = []
    holder: list[Obj] = []

    async def pause() -> None:
        obj = holder[0]
        settled = sum(1 for s in [*before, *arrived] if obj.get(s.id).state is
                      SubmissionState.SETTLED)
        seen.append(settled)
        if not arrived:
            # A request delivered while the pass paused, as the platform delivers one: its own
            # task in a fresh context (not the pass's). The submit route admits and wakes.
            async def request() -> None:
                arrived.append(obj.admit("late", {"n": "late"}))
                obj.space.api.wake()

            await asyncio.get_running_loop().create_task(request(), context=Context())

    async def body() -> None:
        obj = Obj(raw_storage, clock, echo_app, pause=pause)
        holder.append(obj)
        await obj.start()
        before.extend(obj.admit(f"t{i}", {"n": i}) for i in range(4))
        slot = raw_storage.known_alarm()
        assert slot is not None
        clock.set(slot)
        report = await obj.fire()
        # Paused as the first Attempt started (nothing settled yet), and again while the pass
        # was under way: after some Attempts, before the last.
        assert seen and seen[0] == 0
        assert any(1 <= settled < 5 for settled in seen), seen
        # The request served during the pause was admitted, and the same pass ran it.
        assert report.settled == 5
        assert all(obj.get(s.id).state is SubmissionState.SETTLED for s in [*before, *arrived])

    before: list[Submission] = []
    run(body())


def test_the_default_pause_returns_without_suspending() -> None:
    from threadline.pause import no_pause

    coro = no_pause()
    try:
        coro.send(None)
    except StopIteration:
        return
    raise AssertionError("the default pause suspended")
