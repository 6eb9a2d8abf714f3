"""The "Schedules" example of README.md runs as written: the weekday cron fires at 09:00 Paris
time and its submission to the digest agent settles; the five-minute schedule fires on its
grid. The section maps the Agents SDK's ``schedule()``, ``scheduleEvery()`` and cron onto
threadline's."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from schedules_support import MINUTE, START, clock, row

from threadline.schedules import fire_key
from threadline.testing import SimulatedObject
from threadline.threads import Outcome

README = Path(__file__).resolve().parents[3] / "README.md"
#: 2023-11-15 (a Wednesday) 09:00 in Paris.
WEDNESDAY_NINE = 1_700_035_200_000


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Schedules\n")
    return text[start:text.index("\n## ", start + 1)]


def _example() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", _section(), flags=re.DOTALL)
    assert len(blocks) == 1, "the Schedules section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_schedules"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


async def _run(namespace: dict[str, Any]) -> None:
    async with SimulatedObject(namespace["app"], clock=clock(),
                               check_alarm_invariant=True) as obj:
        await obj.run_alarms(until=WEDNESDAY_NINE + MINUTE)
        [sub] = obj.submissions("digest")
        assert sub.idempotency_key == fire_key("digest", WEDNESDAY_NINE)
        assert sub.outcome is Outcome.COMPLETED
        assert sub.result == {"digest_for": "2023-11-15"}
        billing = row(obj, "billing-sync")
        five = 5 * MINUTE
        assert billing is not None
        assert billing.last_fire == WEDNESDAY_NINE // five * five
        assert billing.next_fire == billing.last_fire + five
        assert billing.last_fire > START


def test_the_readme_schedules_example_runs_as_written() -> None:
    asyncio.run(_run(_example()))


def test_the_readme_maps_the_agents_sdk_scheduling_onto_threadline() -> None:
    section = _section()
    table = [line for line in section.splitlines() if line.startswith("| ")]
    for sdk, ours in (("this.schedule(60", "not_before"), ("this.schedule(\"0 8 * * *\"",
                                                            "@app.cron"),
                      ("this.scheduleEvery(30", "@app.every"), ("getSchedules()",
                                                                "Client.schedules")):
        assert any(sdk in line and ours in line for line in table), sdk
