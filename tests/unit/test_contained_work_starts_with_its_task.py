"""User code run under ``contained`` is made only when its task starts.

A pass lost between creating a delivery's task and its first step (a crash, an eviction)
cancels the task before it runs: the subscriber's coroutine must not have been made then, or
it is left behind never awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from threadline.abandonment import ExitRaised, contained


def test_a_task_cancelled_before_its_first_step_never_makes_the_user_coroutine() -> None:
    made: list[str] = []

    async def deliver() -> str:
        return "delivered"

    def make() -> Coroutine[Any, Any, str]:
        made.append("made")
        return deliver()

    async def scenario() -> None:
        task = asyncio.ensure_future(contained(make))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert made == []


def test_a_started_task_makes_and_awaits_it_once() -> None:
    calls: list[str] = []

    async def deliver() -> str:
        calls.append("ran")
        return "delivered"

    assert asyncio.run(contained(deliver)) == "delivered"
    assert calls == ["ran"]


def test_an_exit_raised_by_what_it_makes_comes_out_as_exit_raised() -> None:
    async def leave() -> None:
        raise SystemExit(3)

    with pytest.raises(ExitRaised) as caught:
        asyncio.run(contained(leave))
    assert isinstance(caught.value.raised, SystemExit)
