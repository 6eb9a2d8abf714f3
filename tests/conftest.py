"""Shared fixtures: a fresh migrated SQLite storage and a manual clock per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from threadline.clock import ManualClock
from threadline.storage import SqliteStorage, migrate


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_700_000_000_000)


@pytest.fixture
def raw_storage() -> Iterator[SqliteStorage]:
    storage = SqliteStorage(":memory:")
    yield storage
    storage.close()


@pytest.fixture
def storage(raw_storage: SqliteStorage) -> SqliteStorage:
    migrate(raw_storage)
    return raw_storage
