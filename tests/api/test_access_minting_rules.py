"""What a principal may mint over ``POST /v1/tokens``: never more time or another identity than
it holds itself."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from api_support import Api
from edge_support import API_TOKEN, KEYS, T1, Worker, problem_of

from threadline import Principal, access


@pytest.fixture
def worker(api: Api) -> Worker:
    return Worker(api)


def _mint_over_http(worker: Worker, token: str, **body: Any) -> dict[str, Any]:
    body.setdefault("space", "acme")
    answer = worker.call("POST", "/v1/tokens", body, token=token)
    assert answer.status == 201, answer.body
    return dict(answer.json())


def _expires_at(worker: Worker, token: str) -> int:
    return access.verify(token, KEYS, now_ms=worker.api.clock.now_ms()).expires_at


def test_a_minted_token_never_outlives_the_token_that_minted_it(worker: Worker) -> None:
    parent = worker.mint(capabilities=("admin", "read"), ttl=timedelta(seconds=60))
    child = _mint_over_http(worker, parent, capabilities=["admin", "read"],
                            ttl_seconds=7 * 24 * 3600)
    assert _expires_at(worker, child["token"]) == _expires_at(worker, parent)
    assert child["expires_at"] == _expires_at(worker, parent) * 1000
    worker.api.clock.advance(30_000)
    grandchild = _mint_over_http(worker, child["token"], ttl_seconds=3600)
    assert _expires_at(worker, grandchild["token"]) == _expires_at(worker, parent)


def test_an_expired_principal_mints_nothing_even_within_the_clock_skew(worker: Worker) -> None:
    parent = worker.mint(capabilities=("admin", "read"), ttl=timedelta(seconds=60))
    worker.api.clock.advance(60_000 + 10_000)  # expired, yet still inside the 30 s skew
    assert worker.call("GET", T1, token=parent).status == 200
    problem_of(worker.call("POST", "/v1/tokens", {"space": "acme"}, token=parent), 403)


def test_a_principal_with_a_subject_mints_only_for_that_subject(worker: Worker) -> None:
    alice = worker.mint(capabilities=("admin", "read"), subject="user:alice")
    for body in ({"subject": "user:bob"}, {}):
        problem_of(worker.call("POST", "/v1/tokens", {"space": "acme", **body}, token=alice),
                   403)
    own = _mint_over_http(worker, alice, subject="user:alice")
    assert own["subject"] == "user:alice"


def test_a_scoped_token_without_a_subject_mints_only_without_one(worker: Worker) -> None:
    nobody = worker.mint(capabilities=("admin", "read"))
    problem_of(worker.call("POST", "/v1/tokens", {"space": "acme", "subject": "user:bob"},
                           token=nobody), 403)
    assert _mint_over_http(worker, nobody)["subject"] is None


def test_the_operator_and_a_hook_principal_without_a_subject_name_any_subject(api: Api) -> None:
    async def hook(request: access.AccessRequest) -> Principal | None:
        return Principal(space="acme") if request.headers.get("x-backend") == "yes" else None

    worker = Worker(api, hook=hook)
    assert _mint_over_http(worker, API_TOKEN, subject="user:bob")["subject"] == "user:bob"
    answer = worker.call("POST", "/v1/tokens", {"space": "acme", "subject": "user:carol"},
                         headers={"x-backend": "yes"})
    assert answer.status == 201 and answer.json()["subject"] == "user:carol"


def _stream_key(worker: Worker, token: str) -> str | None:
    worker.sent.clear()
    assert worker.call("GET", T1 + "/events", token=token).status == 200
    (_, forwarded), = worker.sent
    return forwarded.headers.get(access.STREAM_KEY_HEADER)


def test_a_token_minted_without_a_subject_counts_against_its_minters_stream_share(
    worker: Worker
) -> None:
    parent = worker.mint(capabilities=("admin", "read"))
    children = [_mint_over_http(worker, parent, capabilities=["admin", "read"])["token"]
                for _ in range(3)]
    grandchild = _mint_over_http(worker, children[0])["token"]
    keys = {_stream_key(worker, t) for t in (parent, *children, grandchild)}
    assert len(keys) == 1 and keys != {None}
    assert len({_stream_key(worker, worker.mint()), *keys}) == 2  # a stranger has its own


def test_the_operators_children_each_have_their_own_stream_share(worker: Worker) -> None:
    first, second = (_mint_over_http(worker, API_TOKEN)["token"] for _ in range(2))
    keys = {_stream_key(worker, first), _stream_key(worker, second)}
    assert len(keys) == 2 and "" not in keys and None not in keys


def test_a_principal_mints_up_to_its_last_second_and_not_at_it(worker: Worker) -> None:
    parent = worker.mint(capabilities=("admin", "read"), ttl=timedelta(seconds=60))
    worker.api.clock.advance(59_000)  # one second left
    child = _mint_over_http(worker, parent, ttl_seconds=3600)
    assert _expires_at(worker, child["token"]) == _expires_at(worker, parent)
    worker.api.clock.advance(1_000)  # none left
    problem_of(worker.call("POST", "/v1/tokens", {"space": "acme"}, token=parent), 403)
