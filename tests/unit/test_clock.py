import asyncio

import pytest

from threadline.clock import Clock, ManualClock, SystemClock
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
