import json

import pytest

from threadline.api import edge

SECRET = "s3cret-token"


def _decide(path: str, auth: str | None = f"Bearer {SECRET}", method: str = "GET",
            length: int | None = None, secret: str | None = SECRET) -> edge.EdgeDecision:
    return edge.decide(method, path, auth, secret, length, 1_024)


@pytest.mark.parametrize("path", ["/v1/health", "/v1/openapi.json"])
@pytest.mark.parametrize("secret", [SECRET, None])
def test_health_and_openapi_need_no_token(path: str, secret: str | None) -> None:
    decision = _decide(path, auth=None, secret=secret)
    assert decision.response is None and decision.object_name == edge.HEALTH_OBJECT


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer wrong", f"Basic {SECRET}",
                                  f"Bearer {SECRET}x"])
def test_every_other_route_needs_the_token(auth: str | None) -> None:
    decision = _decide("/v1/spaces/acme/threads/t1", auth=auth)
    assert decision.response is not None and decision.response.status == 401
    assert SECRET not in decision.response.body.decode()
    problem = json.loads(decision.response.body)
    assert "detail" not in problem and problem["type"] == "urn:threadline:problem:unauthorized"
    assert decision.response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("secret", [None, ""])
@pytest.mark.parametrize("auth", [None, "Bearer ", "Bearer anything"])
@pytest.mark.parametrize("path", ["/v1/spaces/acme/threads/t1", "/v1/spaces/acme/maintenance",
                                  "/v2/unknown"])
def test_a_missing_secret_is_503_on_every_authenticated_route(
    secret: str | None, auth: str | None, path: str
) -> None:
    decision = _decide(path, auth=auth, secret=secret)
    assert decision.response is not None and decision.response.status == 503
    problem = json.loads(decision.response.body)
    assert problem["type"] == "urn:threadline:problem:auth-unconfigured"
    assert edge.TOKEN_SECRET in problem["detail"]


def test_valid_requests_go_to_the_space_object() -> None:
    decision = _decide("/v1/spaces/acme.prod:eu/threads/t-1/submissions", method="POST", length=10)
    assert decision.response is None and decision.object_name == "acme.prod:eu"


@pytest.mark.parametrize("path", ["/v1/spaces/acme/threads/bad id", "/v1/spaces/" + "a" * 129,
                                  "/v1/spaces/ac%2Fme/threads", "/v1/spaces//threads",
                                  "/v1/spaces/./threads", "/v1/spaces/../threads",
                                  "/v1/spaces/acme/threads/..", "/v1/spaces/acme/threads/."])
def test_bad_ids_are_400(path: str) -> None:
    decision = _decide(path)
    assert decision.response is not None and decision.response.status == 400
    assert json.loads(decision.response.body)["type"] == "urn:threadline:problem:invalid-id"


def test_dotted_ids_that_are_not_dot_segments_pass() -> None:
    decision = _decide("/v1/spaces/a..b/threads/.hidden")
    assert decision.response is None and decision.object_name == "a..b"


def test_unknown_paths_are_404_and_big_bodies_413() -> None:
    missing = _decide("/v2/other")
    assert missing.response is not None and missing.response.status == 404
    big = _decide("/v1/spaces/acme/threads/t/submissions", method="POST", length=1_025)
    assert big.response is not None and big.response.status == 413
    exact = _decide("/v1/spaces/acme/threads/t/submissions", method="POST", length=1_024)
    assert exact.response is None


def test_token_comparison_uses_the_whole_secret() -> None:
    assert edge.token_matches(f"Bearer {SECRET}", SECRET)
    assert edge.token_matches(f"bearer {SECRET}", SECRET)
    assert not edge.token_matches(f"Bearer {SECRET[:-1]}", SECRET)
    assert not edge.token_matches("Bearer ", "")


def _stream(sizes: list[int]) -> tuple[list[int], object]:
    pulled: list[int] = []

    async def next_chunk() -> bytes | None:
        if len(pulled) == len(sizes):
            return None
        pulled.append(sizes[len(pulled)])
        return b"x" * pulled[-1]

    return pulled, next_chunk


def test_a_streamed_body_is_read_whole_up_to_the_cap() -> None:
    import asyncio

    _, next_chunk = _stream([400, 400, 224])
    assert asyncio.run(edge.read_capped(next_chunk, 1_024)) == b"x" * 1_024  # type: ignore[arg-type]


def test_a_streamed_body_stops_being_read_past_the_cap() -> None:
    import asyncio

    pulled, next_chunk = _stream([600, 600, 600, 600])
    assert asyncio.run(edge.read_capped(next_chunk, 1_024)) is None  # type: ignore[arg-type]
    assert pulled == [600, 600]  # nothing is pulled after the cap is passed
