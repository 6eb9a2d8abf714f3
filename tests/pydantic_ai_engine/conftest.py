from __future__ import annotations

import pytest

from threadline.testing import Effects, SettlementLog


@pytest.fixture
def effects() -> Effects:
    return Effects()


@pytest.fixture
def settlements(monkeypatch: pytest.MonkeyPatch) -> SettlementLog:
    """Every settle transition of the test, counted where a duplicate would show."""
    return SettlementLog().install(monkeypatch)
