"""The deployment's API token: only ever in a header, and never a short one."""

from __future__ import annotations

import logging

import pytest
from api_support import Api
from edge_support import API_TOKEN, T1, Worker, problem_of

from threadline.api import edge


def test_the_api_token_in_a_url_opens_nothing(api: Api) -> None:
    worker = Worker(api)
    assert worker.call("GET", T1 + "/events", token=API_TOKEN).status == 200
    problem = problem_of(worker.call("GET", T1 + f"/events?access_token={API_TOKEN}"), 401)
    assert API_TOKEN not in str(problem)
    assert len(worker.sent) == 1  # only the call with the header reached the object
    scoped = worker.mint()
    assert worker.call("GET", T1 + f"/events?access_token={scoped}").status == 200


def test_an_api_token_shorter_than_32_characters_serves_nothing_and_says_so_once(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="threadline.access")
    short = "x" * (edge.MIN_API_TOKEN_LENGTH - 1)
    worker = Worker(api, api_token=short)
    for _ in range(2):
        problem = problem_of(worker.call("GET", T1, token=short), 503)
        assert "32 characters" in problem["detail"] and short not in str(problem)
    problem_of(worker.call("GET", T1, token=worker.mint()), 503)  # not even scoped tokens
    assert worker.call("GET", "/v1/health").status == 200
    assert worker.sent == [("threadline:health", worker.sent[0][1])]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "THREADLINE_API_TOKEN" in errors[0].getMessage()
    assert short not in caplog.text


def test_an_api_token_of_32_characters_serves(api: Api) -> None:
    exact = "y" * edge.MIN_API_TOKEN_LENGTH
    assert Worker(api, api_token=exact).call("GET", T1, token=exact).status == 200
