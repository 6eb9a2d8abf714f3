"""The "Messages" example of README.md runs as written: an order placed in the ``shop`` space
becomes an invoice admitted once and settled in the ``billing`` space, and the order's
submission detail lists the message, delivered."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from threadline import ManualClock
from threadline.api.http import Request
from threadline.testing import SimulatedDeployment
from threadline.threads.model import Outcome

README = Path(__file__).resolve().parents[3] / "README.md"
START = 1_700_000_000_000


def _example() -> dict[str, Any]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Messages\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Messages section shows one example"
    namespace: dict[str, Any] = {"__name__": "readme_messages"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


def test_the_readme_messages_example_runs_as_written() -> None:
    app = _example()["app"]

    async def go() -> None:
        async with SimulatedDeployment(app, clock=ManualClock(START),
                                       spaces=["shop", "billing"],
                                       check_alarm_invariant=True) as deployment:
            shop = deployment.space("shop")
            order = shop.admit("order-7", "orders", {"id": "o-7"})
            await deployment.run_alarms()
            assert shop.submission(order.id).result == {"placed": "o-7"}
            (invoice,) = deployment.space("billing").submissions("invoices")
            assert invoice.agent == "billing" and invoice.outcome is Outcome.COMPLETED
            assert invoice.result == {"invoiced": "o-7", "total": 40}
            path = f"/v1/spaces/shop/threads/order-7/submissions/{order.id}"
            detail = json.loads((await shop.space.handle(
                Request.from_url("GET", path, {}, b""))).body)
            (message,) = detail["messages"]
            assert (message["id"], message["state"], message["submission_id"]) == (
                f"{order.id}:send", "delivered", invoice.id)
            assert all(obj.alarm_at is None for obj in deployment.objects.values())

    asyncio.run(go())
