from __future__ import annotations

from collections.abc import Callable

import pytest

from core.threads.thread_harness import Effects, Harness, SettlementLog
from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.storage import SqliteStorage


@pytest.fixture
def effects() -> Effects:
    return Effects()


@pytest.fixture
def make_harness(
    storage: SqliteStorage, clock: ManualClock
) -> Callable[[Callable[[RuntimeConfig], Application]], Harness]:
    def make(build: Callable[[RuntimeConfig], Application],
             config: RuntimeConfig | None = None) -> Harness:
        chosen = config if config is not None else RuntimeConfig()
        return Harness(storage, clock, lambda: build(chosen))

    return make


@pytest.fixture
def settlements(monkeypatch: pytest.MonkeyPatch) -> SettlementLog:
    """Every settle transition of the test, counted where a duplicate would show."""
    return SettlementLog().install(monkeypatch)
