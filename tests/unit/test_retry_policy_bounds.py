"""``RetryPolicy`` at the edges of its bounds: each bound is accepted where the docs put it and
refused one step past, a bool or a string is no number, and a ``RetryAfter`` of exactly
``max_wait_ms`` is still waited."""

from __future__ import annotations

from typing import Any

import pytest

from threadline import RetryAfter, RetryPolicy
from threadline.threads.retry_policy import (
    MAX_BACKOFF,
    MAX_STEP_DELAY_MS,
    MAX_STEP_TRIES,
    MAX_STEP_WAITS,
    MAX_WAIT_MS,
)

EDGES = [
    {"max_attempts": 1}, {"max_attempts": MAX_STEP_TRIES},
    {"initial_delay_ms": 0}, {"initial_delay_ms": MAX_STEP_DELAY_MS},
    {"max_delay_ms": 0}, {"max_delay_ms": MAX_STEP_DELAY_MS},
    {"backoff": 1}, {"backoff": 1.0}, {"backoff": MAX_BACKOFF},
    {"max_waits": 0}, {"max_waits": MAX_STEP_WAITS},
    {"max_wait_ms": 0}, {"max_wait_ms": MAX_WAIT_MS},
]
PAST = [
    {"max_attempts": 0}, {"max_attempts": MAX_STEP_TRIES + 1},
    {"initial_delay_ms": -1}, {"initial_delay_ms": MAX_STEP_DELAY_MS + 1},
    {"max_delay_ms": MAX_STEP_DELAY_MS + 1},
    {"backoff": 0.999}, {"backoff": MAX_BACKOFF + 0.001}, {"backoff": True}, {"backoff": "2"},
    {"non_retryable": [ValueError]},
    {"max_waits": MAX_STEP_WAITS + 1}, {"max_wait_ms": MAX_WAIT_MS + 1},
]


@pytest.mark.parametrize("edge", EDGES, ids=repr)
def test_each_bound_is_accepted_at_its_edge(edge: dict[str, Any]) -> None:
    policy = RetryPolicy(**edge)
    [(name, value)] = edge.items()
    assert getattr(policy, name) == value


@pytest.mark.parametrize("past", PAST, ids=repr)
def test_each_bound_is_refused_one_step_past_it(past: dict[str, Any]) -> None:
    [name] = past
    with pytest.raises(ValueError, match=name):
        RetryPolicy(**past)


def test_a_wait_of_exactly_max_wait_ms_is_waited_and_one_more_ms_is_not() -> None:
    policy = RetryPolicy(max_wait_ms=2_000, max_waits=2)
    assert policy.waits_for(RetryAfter(2), waited=1)
    assert not policy.waits_for(RetryAfter(2.001), waited=0)
    assert not policy.waits_for(RetryAfter(1), waited=2)
