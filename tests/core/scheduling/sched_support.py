"""Helpers shared by the scheduling tests."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

P = ParamSpec("P")


def run_async(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an async test body to completion on a fresh event loop."""

    @functools.wraps(fn)
    def runner(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(fn(*args, **kwargs))

    return runner
