from __future__ import annotations

import pytest

from core.threads.thread_harness import Effects


@pytest.fixture
def effects() -> Effects:
    return Effects()
