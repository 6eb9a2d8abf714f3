from __future__ import annotations

import pytest

from threadline.testing import Effects


@pytest.fixture
def effects() -> Effects:
    return Effects()
