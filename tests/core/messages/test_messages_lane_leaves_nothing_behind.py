"""A target space's queue is forgotten once it is drained, and each failed try is logged with
its attempt and how many tries in a row its space failed; a message failing for good is logged
once, with the reason's type only."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from messages_support import CONFIG, START, build_app, forward, sent

from threadline import ManualClock
from threadline.testing import SimulatedDeployment


def _targets(world: SimulatedDeployment) -> dict[str, int]:
    return {name: int(obj.storage.exec(
        "SELECT COUNT(*) AS n FROM tl_message_targets").one()["n"])
        for name, obj in world.objects.items()}


async def _drained(caplog: pytest.LogCaptureFixture) -> None:
    app = build_app(CONFIG.model_copy(update={"message_senders": ("a",)}))
    async with SimulatedDeployment(app, clock=ManualClock(START),
                                   spaces=["a", "b", "c"], check_alarm_invariant=True) as world:
        world.fail_deliveries(2, to_space="b")
        ok = world.space("a").admit("t1", "forward", forward("b", "inbox"))
        await world.run_alarms()
        refused = world.space("c").admit("t1", "forward", forward("b", "nope"))
        await world.run_alarms()
        (delivered,) = sent(world.space("a"), ok.id)
        assert delivered.state == "delivered"
        (failed,) = sent(world.space("c"), refused.id)
        assert failed.state == "failed"
        assert _targets(world) == {"a": 0, "b": 0, "c": 0}
        assert all(obj.alarm_at is None for obj in world.objects.values())
        tries = [r.getMessage() for r in caplog.records
                 if f"message {delivered.id!r}" in r.getMessage()]
        assert [re.sub(r"\(.*?\); the space is retried at \d+", "(…); retried", line)
                for line in tries] == [
            f"threadline: message {delivered.id!r} to space 'b' not delivered (…); retried "
            f"(attempt {n}, {n} in a row to it)" for n in (1, 2)]
        ended = [r.getMessage() for r in caplog.records if "failed for good" in r.getMessage()]
        assert ended == [f"threadline: message {failed.id!r} to space 'b', thread 'nope' failed "
                         f"for good: Forbidden"]


def test_a_drained_target_is_forgotten_and_each_failed_try_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="threadline.maintenance")
    asyncio.run(_drained(caplog))
