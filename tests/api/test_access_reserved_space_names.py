"""``threadline:`` spaces are threadline's own (``threadline:health`` answers every open
request): no request, token or message names one."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from api_support import Api
from edge_support import API_TOKEN, KEYS, Worker, problem_of

import threadline
from threadline import access
from threadline.api.edge import HEALTH_OBJECT
from threadline.testing import SimulatedDeployment


@pytest.mark.parametrize("path", ["/v1/spaces/threadline:health/threads",
                                  "/v1/spaces/threadline:health/threads/t1",
                                  "/v1/spaces/threadline:x/maintenance"])
def test_a_reserved_space_in_a_path_is_refused_and_reaches_no_object(api: Api, path: str) -> None:
    worker = Worker(api)
    problem = problem_of(worker.call("GET", path, token=API_TOKEN), 400)
    assert problem["field"] == "space" and "threadline:" in problem["detail"]
    assert worker.sent == []


def test_no_token_is_minted_for_a_reserved_space(api: Api) -> None:
    with pytest.raises(ValueError, match="threadline:"):
        access.mint(KEYS, space=HEALTH_OBJECT, ttl=timedelta(minutes=1))
    worker = Worker(api)
    problem = problem_of(worker.call("POST", "/v1/tokens", {"space": HEALTH_OBJECT},
                                     token=API_TOKEN), 422)
    assert problem["field"] == "space"


def test_an_agent_cannot_message_a_reserved_space() -> None:
    app = threadline.Application()
    refused: list[str] = []

    @app.agent("sender")
    async def sender(turn: threadline.Turn) -> str:
        try:
            await turn.send(HEALTH_OBJECT, "t1", {"x": 1}, agent="sender")
        except threadline.ValidationFailed as error:
            refused.append(error.message)
        return "done"

    async def go() -> None:
        deployment = SimulatedDeployment(app, spaces=["acme"])
        await deployment.start()
        acme = deployment.space("acme")
        submission = acme.admit("t1", "sender", {})
        await deployment.run_alarms()
        assert acme.submission(submission.id).result == "done"
        assert HEALTH_OBJECT not in deployment.objects
        with pytest.raises(threadline.ValidationFailed, match="threadline:"):
            deployment.space(HEALTH_OBJECT)
        deployment.close()

    asyncio.run(go())
    assert refused and "threadline:" in refused[0]
