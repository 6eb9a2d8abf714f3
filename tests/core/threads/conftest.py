from __future__ import annotations

from collections.abc import Callable

import pytest

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.config import RuntimeConfig
from threadline.storage import SqliteStorage
from threadline.testing import Effects, SettlementLog, ThreadHarness


@pytest.fixture
def effects() -> Effects:
    return Effects()


@pytest.fixture
def make_harness(
    storage: SqliteStorage, clock: ManualClock
) -> Callable[[Callable[[RuntimeConfig], Application]], ThreadHarness]:
    def make(build: Callable[[RuntimeConfig], Application],
             config: RuntimeConfig | None = None) -> ThreadHarness:
        chosen = config if config is not None else RuntimeConfig()
        return ThreadHarness(storage, clock, lambda: build(chosen))

    return make


@pytest.fixture
def settlements(monkeypatch: pytest.MonkeyPatch) -> SettlementLog:
    """Every settle transition of the test, counted where a duplicate would show."""
    return SettlementLog().install(monkeypatch)
