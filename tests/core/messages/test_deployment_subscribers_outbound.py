"""A :class:`SimulatedDeployment` gives every space's subscribers the Worker environment and
outbound HTTP port it was made with, as the one Worker that serves all the spaces does: a
webhook in each space signs with the environment's secret and posts through the port."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

from messages_support import START, build_app

import threadline
from threadline import ManualClock, Turn
from threadline.delivery.outbound import OutboundResponse
from threadline.testing import SimulatedDeployment

SECRET = "whsec_deployment"


class Port:
    """The outbound port: keeps what was posted, answers 200."""

    def __init__(self) -> None:
        self.posted: list[tuple[dict[str, str], bytes]] = []

    async def post(self, url: str, *, headers: Mapping[str, str], body: bytes,
                   timeout_ms: int) -> OutboundResponse:
        self.posted.append((dict(headers), body))
        return OutboundResponse(200)


async def _deliver(port: Port) -> None:
    app = build_app()

    @app.agent("note")
    async def note(turn: Turn) -> None:
        await turn.emit({"in": turn.input}, kind="note")

    app.webhook("hook", url="https://receiver.example/hook", secret_env="HOOK_SECRET")
    async with SimulatedDeployment(app, clock=ManualClock(START), spaces=("a", "b"),
                                   env={"HOOK_SECRET": SECRET}, http=port,
                                   check_alarm_invariant=True) as deployment:
        deployment.space("a").admit("t", "note", "to a")
        deployment.space("b").admit("t", "note", "to b")
        await deployment.run_alarms()


def test_a_deployments_spaces_deliver_through_its_environment_and_outbound_port() -> None:
    port = Port()
    asyncio.run(_deliver(port))
    bodies = {}
    for headers, body in port.posted:
        signed = headers["threadline-signature"]
        at = int(signed.split(",")[0].removeprefix("t="))
        threadline.verify_signature(body, signed, SECRET, now=at)
        document = json.loads(body)
        bodies[document["space"]] = [r["body"] for r in document["records"] if r["kind"] == "note"]
    assert bodies == {"a": [{"in": "to a"}], "b": [{"in": "to b"}]}
