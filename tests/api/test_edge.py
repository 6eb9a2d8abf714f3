import json

import pytest

from threadline.api import edge

SECRET = "s3cret-token"


def _decide(path: str, auth: str | None = f"Bearer {SECRET}", method: str = "GET",
            length: int | None = None, secret: str | None = SECRET) -> edge.EdgeDecision:
    return edge.decide(method, path, auth, secret, length, 1_024)


def test_health_needs_no_token() -> None:
    decision = _decide("/v1/health", auth=None)
    assert decision.response is None and decision.object_name == edge.HEALTH_OBJECT


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer wrong", f"Basic {SECRET}",
                                  f"Bearer {SECRET}x"])
def test_every_other_route_needs_the_token(auth: str | None) -> None:
    decision = _decide("/v1/spaces/acme/threads/t1", auth=auth)
    assert decision.response is not None and decision.response.status == 401
    assert SECRET not in decision.response.body.decode()
    assert "detail" not in json.loads(decision.response.body)


def test_no_configured_secret_refuses_everyone() -> None:
    decision = _decide("/v1/spaces/acme/threads/t1", auth="Bearer ", secret=None)
    assert decision.response is not None and decision.response.status == 401


def test_valid_requests_go_to_the_space_object() -> None:
    decision = _decide("/v1/spaces/acme.prod:eu/threads/t-1/submissions", method="POST", length=10)
    assert decision.response is None and decision.object_name == "acme.prod:eu"


@pytest.mark.parametrize("path", ["/v1/spaces/acme/threads/bad id", "/v1/spaces/" + "a" * 129,
                                  "/v1/spaces/ac%2Fme/threads", "/v1/spaces//threads"])
def test_bad_ids_are_400(path: str) -> None:
    decision = _decide(path)
    assert decision.response is not None and decision.response.status == 400


def test_unknown_paths_are_404_and_big_bodies_413() -> None:
    missing = _decide("/v2/other")
    assert missing.response is not None and missing.response.status == 404
    big = _decide("/v1/spaces/acme/threads/t/submissions", method="POST", length=1_025)
    assert big.response is not None and big.response.status == 413


def test_token_comparison_uses_the_whole_secret() -> None:
    assert edge.token_matches(f"Bearer {SECRET}", SECRET)
    assert edge.token_matches(f"bearer {SECRET}", SECRET)
    assert not edge.token_matches(f"Bearer {SECRET[:-1]}", SECRET)
