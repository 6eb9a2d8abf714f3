from __future__ import annotations

import pytest
from api_support import Api, make_api

from threadline import ManualClock


@pytest.fixture
def api(clock: ManualClock) -> Api:
    """The example app (echo, confirm) behind one object's HTTP surface."""
    return make_api(clock)
