"""Fixtures for the scheduling substrate: one wired scheduler over the migrated storage."""

from __future__ import annotations

import random

import pytest

from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.scheduling import DueQueue, Failpoints, Scheduler, build_scheduler
from threadline.storage import SqliteStorage


@pytest.fixture
def config() -> RuntimeConfig:
    return RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=300_000,
                         park_after_stalls=3)


@pytest.fixture
def failpoints() -> Failpoints:
    return Failpoints()


@pytest.fixture
def sched(
    storage: SqliteStorage, clock: ManualClock, config: RuntimeConfig, failpoints: Failpoints
) -> Scheduler:
    return build_scheduler(storage, clock, config, random.Random(7), failpoints)


@pytest.fixture
def queue(sched: Scheduler) -> DueQueue:
    return sched.due_queue

