import asyncio

import pytest

from threadline.clock import Clock, ManualClock, SystemClock, timer
from threadline.ids import RandomIds, SequentialIds


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(start_ms=1_000)
    assert clock.now_ms() == 1_000
    clock.advance(250)
    assert clock.now_ms() == 1_250
    clock.set(2_000)
    assert clock.now_ms() == 2_000
    clock.advance(0)
    assert clock.now_ms() == 2_000


def test_manual_clock_never_goes_backwards() -> None:
    clock = ManualClock(start_ms=5_000)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(4_999)
    assert clock.now_ms() == 5_000


def test_sleepers_wake_in_deadline_order() -> None:
    async def scenario() -> list[str]:
        clock = ManualClock(start_ms=0)
        woke: list[str] = []

        async def sleeper(name: str, deadline: int) -> None:
            await clock.sleep_until(deadline)
            woke.append(f"{name}@{clock.now_ms()}")

        tasks = [
            asyncio.create_task(sleeper("late", 300)),
            asyncio.create_task(sleeper("early", 100)),
            asyncio.create_task(sleeper("tie-first", 200)),
            asyncio.create_task(sleeper("tie-second", 200)),
        ]
        await asyncio.sleep(0)
        assert clock.next_deadline() == 100
        clock.advance(150)
        await asyncio.sleep(0)
        assert woke == ["early@150"]
        clock.advance(1_000)
        await asyncio.gather(*tasks)
        assert clock.next_deadline() is None
        return woke

    assert asyncio.run(scenario()) == [
        "early@150",
        "tie-first@1150",
        "tie-second@1150",
        "late@1150",
    ]


def test_sleep_until_the_past_returns_at_once() -> None:
    async def scenario() -> int:
        clock = ManualClock(start_ms=10)
        await clock.sleep_until(5)
        return clock.now_ms()

    assert asyncio.run(scenario()) == 10


def test_system_clock_is_a_clock() -> None:
    clock = SystemClock()
    assert isinstance(clock, Clock)
    assert isinstance(ManualClock(), Clock)
    assert clock.now_ms() > 1_600_000_000_000


def test_id_sources_are_injected_and_reproducible() -> None:
    import random

    first = RandomIds(random.Random(7))
    second = RandomIds(random.Random(7))
    a, b = first.new_id("sub"), second.new_id("sub")
    assert a == b and a.startswith("sub_") and len(a) == 4 + 32
    seq = SequentialIds()
    assert [seq.new_id("t"), seq.new_id("s")] == ["t_000001", "s_000002"]


def test_a_manual_timer_is_a_future_resolved_when_time_reaches_it() -> None:
    async def scenario() -> list[bool]:
        clock = ManualClock(start_ms=1_000)
        first, later = clock.timer(1_010), clock.timer(1_020)
        seen = [first.done()]
        clock.advance(10)
        seen += [first.done(), later.done()]
        later.cancel()
        clock.advance(10)  # a cancelled timer is skipped, not resolved
        seen += [later.cancelled(), clock.next_deadline() is None]
        with pytest.raises(ValueError, match="still to come"):
            clock.timer(1_020)
        return seen

    assert asyncio.run(scenario()) == [False, True, False, True, True]


def test_a_system_timer_is_one_timer_handle_cancelled_with_its_future() -> None:
    async def scenario() -> tuple[bool, int, int]:
        loop = asyncio.get_running_loop()
        clock = SystemClock()
        due = clock.timer(clock.now_ms() - 5)  # already reached: resolved on the next turn
        await asyncio.wait_for(due, 1)
        far = clock.timer(clock.now_ms() + 3_600_000)
        armed = len(loop._scheduled)  # type: ignore[attr-defined]
        far.cancel()
        await asyncio.sleep(0)
        return due.done(), armed, sum(not h.cancelled() for h in loop._scheduled)  # type: ignore[attr-defined]

    done, armed, left = asyncio.run(scenario())
    assert done and armed >= 1 and left == 0


def test_timer_races_work_without_a_task_where_the_clock_offers_one() -> None:
    class SleepOnly:
        """A clock of the bare protocol: no ``timer``."""

        def __init__(self) -> None:
            self.inner = ManualClock(start_ms=0)

        def now_ms(self) -> int:
            return self.inner.now_ms()

        async def sleep_until(self, epoch_ms: int) -> None:
            await self.inner.sleep_until(epoch_ms)

    async def scenario() -> list[bool]:
        manual, bare = ManualClock(start_ms=0), SleepOnly()
        kinds = [isinstance(timer(manual, 5), asyncio.Task),
                 isinstance(timer(manual, 0), asyncio.Task),  # reached: the sleeping task
                 isinstance(timer(bare, 5), asyncio.Task)]
        racing = timer(bare, 5)
        bare.inner.advance(5)
        await asyncio.wait_for(racing, 1)
        return [*kinds, racing.done()]

    assert asyncio.run(scenario()) == [False, True, True, True]


def test_a_system_timer_is_armed_for_the_time_left_in_seconds() -> None:
    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        clock = SystemClock()
        far = clock.timer(clock.now_ms() + 1_000_000)
        (handle,) = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        left = handle.when() - loop.time()
        far.cancel()
        return left

    assert 999.8 < asyncio.run(scenario()) <= 1_000.0
