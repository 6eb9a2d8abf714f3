"""An event stream's wait holds one cancellable clock timer for its heartbeat, never a sleep.

Under Pyodide a cancelled ``asyncio.sleep`` leaves its JavaScript timeout active until it would
have fired; a stream woken by every delta of a streamed answer would pile one up per wake
(workerd allows an event 10,000 active timeouts, which fifty Threads streaming 200 tokens each
reached). The deployed clock's ``timer`` clears its timeout when the future is cancelled, so
the wait must take the heartbeat from ``timer`` and cancel it when something else wakes it.
"""

from __future__ import annotations

import asyncio

from threadline.api.subscribers import Subscribers


class _Feed:
    def __init__(self) -> None:
        self.revision = 0
        self._moved = asyncio.Event()

    def commit(self) -> None:
        self.revision += 1
        self._moved.set()

    async def await_change(self, revision: int) -> None:
        while self.revision == revision:
            await self._moved.wait()


class _TimerClock:
    """A clock whose deadlines are futures the test sees; sleeping on it is refused."""

    def __init__(self) -> None:
        self.timers: list[asyncio.Future[None]] = []

    def now_ms(self) -> int:
        return 1_000

    async def sleep_until(self, epoch_ms: int) -> None:
        raise AssertionError("the heartbeat must be the clock's timer, not a sleep")

    def timer(self, epoch_ms: int) -> asyncio.Future[None]:
        made: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.timers.append(made)
        return made


def test_a_wake_by_a_delta_or_a_commit_cancels_the_heartbeat_timer() -> None:
    async def scenario() -> None:
        feed, clock = _Feed(), _TimerClock()
        subscription = Subscribers().open(feed, clock)
        loop = asyncio.get_running_loop()

        delta: asyncio.Future[None] = loop.create_future()
        loop.call_soon(delta.set_result, None)
        assert await subscription.wait_either(0, 16_000, delta) == (False, True)
        loop.call_soon(feed.commit)
        other: asyncio.Future[None] = loop.create_future()
        assert await subscription.wait_either(0, 16_000, other) == (True, False)
        assert other.cancelled()
        assert len(clock.timers) == 2
        assert all(timer.cancelled() for timer in clock.timers)

    asyncio.run(scenario())


def test_the_heartbeat_timer_ends_a_quiet_wait() -> None:
    async def scenario() -> None:
        feed, clock = _Feed(), _TimerClock()
        subscription = Subscribers().open(feed, clock)
        other: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(subscription.wait_either(0, 16_000, other))
        await asyncio.sleep(0)
        [heartbeat] = clock.timers
        heartbeat.set_result(None)
        assert await waiting == (False, False)
        assert other.cancelled()

    asyncio.run(scenario())
