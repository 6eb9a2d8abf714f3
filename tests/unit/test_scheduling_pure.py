from __future__ import annotations

import random

import pytest

from threadline.config import RuntimeConfig
from threadline.errors import SchedulingError
from threadline.scheduling import (
    FRAMEWORK_LANES,
    NATIVE,
    backoff_ms,
    validate_host_lane_id,
    validate_lane_id,
)


@pytest.mark.parametrize("good", ["a", "0", "billing.sync", "x:y-z_1", "a" * 64])
def test_host_lane_ids_accepted(good: str) -> None:
    assert validate_host_lane_id(good) == good


@pytest.mark.parametrize(
    "bad", ["", "A", "-a", ".a", "a" * 65, "a b", "threadline:native", "threadline:mine", "é"]
)
def test_host_lane_ids_refused(bad: str) -> None:
    with pytest.raises(SchedulingError):
        validate_host_lane_id(bad)


def test_framework_lanes_pass_the_general_check() -> None:
    assert NATIVE in FRAMEWORK_LANES
    for lane in FRAMEWORK_LANES:
        assert validate_lane_id(lane) == lane
        with pytest.raises(SchedulingError):
            validate_host_lane_id(lane)


def test_backoff_bounds() -> None:
    config = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)
    rng = random.Random(3)
    for stalls in range(0, 40):
        ceiling = min(300_000, 1_000 * 2 ** min(stalls, 30))
        for _ in range(20):
            delay = backoff_ms(stalls, config, rng)
            assert -(-ceiling // 2) <= delay <= ceiling
    assert backoff_ms(100, config, rng) <= 300_000


def test_backoff_is_deterministic_for_a_seed_and_spreads() -> None:
    config = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000)
    first = [backoff_ms(4, config, random.Random(9)) for _ in range(3)]
    assert len(set(first)) == 1
    spread = {backoff_ms(4, config, random.Random(seed)) for seed in range(50)}
    assert min(spread) >= 8_000 and max(spread) <= 16_000 and len(spread) > 10
    assert backoff_ms(0, config, random.Random(1)) in range(500, 1_001)
