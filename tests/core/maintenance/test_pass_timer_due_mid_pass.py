"""A timer that falls due while a pass runs, on a Thread the pass never visited, still wakes:
the checkpoint bounds the native lane by the timers not due at the pass's last full scan."""

from __future__ import annotations

from typing import Any

from pass_support import CONFIG, Obj, run

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.storage import SqliteStorage
from threadline.threads import Turn
from threadline.threads.model import SubmissionState


def test_a_timer_due_during_the_pass_wakes_its_unvisited_thread(
    raw_storage: SqliteStorage, clock: ManualClock
) -> None:
    async def body() -> None:
        def make() -> Application:
            app = Application(CONFIG)

            @app.agent("sleeper")
            async def sleeper(turn: Turn) -> Any:
                await turn.sleep(1.0)
                return {"slept": True}

            @app.agent("slow")
            async def slow(turn: Turn) -> Any:
                # The Attempt outlasts the sleeper's timer (it falls due mid-pass).
                clock.advance(5_000)
                return {"done": True}

            return app

        obj = Obj(raw_storage, clock, make)
        await obj.start()
        await obj.run()
        asleep = obj.admit("s", {}, agent="sleeper")
        clock.set(max(raw_storage.known_alarm() or 0, clock.now_ms()))
        await obj.fire()
        assert obj.get(asleep.id).state is SubmissionState.SUSPENDED
        timer = raw_storage.known_alarm()
        assert timer is not None and timer > clock.now_ms() + CONFIG.min_alarm_delay_ms
        # Before the timer: a pass that does not visit "s" (its timer is not due yet).
        busy = obj.admit("w", {}, agent="slow")
        clock.set(max(raw_storage.known_alarm() or 0, clock.now_ms()))
        assert clock.now_ms() < timer
        await obj.fire()
        assert obj.get(busy.id).state is SubmissionState.SETTLED
        assert clock.now_ms() > timer
        # The timer fell due meanwhile: the checkpoint keeps an alarm for it.
        assert raw_storage.known_alarm() is not None
        await obj.run()
        assert obj.get(asleep.id).state is SubmissionState.SETTLED

    run(body())
