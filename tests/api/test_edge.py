"""The Worker's edge checks with the deployment's API token (scoped tokens and the hook are in
tests/api/test_access_*.py)."""

import asyncio
import json

import pytest

from threadline import ManualClock
from threadline.api import edge
from threadline.api.http import Response

SECRET = "s3cret-token-" + "s" * 32


def _decide(path: str, auth: str | None = f"Bearer {SECRET}", method: str = "GET",
            length: int | None = None, secret: str | None = SECRET) -> Response | edge.Forward:
    checks = edge.Edge(edge.EdgeConfig(api_token=secret, max_body_bytes=1_024), ManualClock())
    headers = {} if auth is None else {"authorization": auth}
    if length is not None:
        headers["content-length"] = str(length)
    return asyncio.run(checks.admit(method, "https://threadline.test" + path, headers))


def _refused(outcome: Response | edge.Forward, status: int) -> Response:
    assert isinstance(outcome, Response), outcome
    assert outcome.status == status, outcome.body
    return outcome


def _forwarded(outcome: Response | edge.Forward) -> edge.Forward:
    assert isinstance(outcome, edge.Forward), getattr(outcome, "body", outcome)
    return outcome


@pytest.mark.parametrize("path", ["/v1/health", "/v1/openapi.json"])
@pytest.mark.parametrize("secret", [SECRET, None])
def test_health_and_openapi_need_no_token(path: str, secret: str | None) -> None:
    decision = _forwarded(_decide(path, auth=None, secret=secret))
    assert decision.object_name == edge.HEALTH_OBJECT


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer wrong", f"Basic {SECRET}",
                                  f"Bearer {SECRET}x"])
def test_every_other_route_needs_the_token(auth: str | None) -> None:
    response = _refused(_decide("/v1/spaces/acme/threads/t1", auth=auth), 401)
    assert SECRET not in response.body.decode()
    problem = json.loads(response.body)
    assert problem["type"] == "urn:threadline:problem:unauthorized"
    # Which credential is expected, in the same words whatever was sent.
    assert problem["detail"] == edge.EXPECTED_CREDENTIAL
    offered = auth is not None and auth.startswith("Bearer ") and auth.strip() != "Bearer"
    assert response.headers["www-authenticate"] == (
        'Bearer realm="threadline", error="invalid_token"' if offered
        else 'Bearer realm="threadline"')


def test_a_401_on_the_events_route_names_the_query_parameter_too() -> None:
    response = _refused(_decide("/v1/spaces/acme/threads/t1/events", auth=None), 401)
    detail = json.loads(response.body)["detail"]
    assert detail == edge.EXPECTED_CREDENTIAL + edge.EXPECTED_IN_QUERY
    assert "?access_token=<token>" in detail


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("secret", [SECRET, None])
def test_the_root_answers_a_page_a_person_can_read_without_a_credential(
    method: str, secret: str | None
) -> None:
    response = _decide("/", auth=None, secret=secret, method=method)
    assert isinstance(response, Response) and response.status == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    if method == "HEAD":
        assert response.body == b""
    else:
        page = response.body.decode()
        assert "durable agent threads" in page
        assert 'href="/v1/health"' in page and 'href="/v1/openapi.json"' in page
        assert "Authorization: Bearer &lt;token&gt;" in page
        assert SECRET not in page


def test_the_root_takes_no_other_method() -> None:
    response = _refused(_decide("/", auth=None, method="POST"), 401)
    assert json.loads(response.body)["detail"] == edge.EXPECTED_CREDENTIAL


@pytest.mark.parametrize("secret", [None, ""])
@pytest.mark.parametrize("auth", [None, "Bearer ", "Bearer anything"])
@pytest.mark.parametrize("path", ["/v1/spaces/acme/threads/t1", "/v1/spaces/acme/maintenance",
                                  "/v2/unknown"])
def test_a_missing_secret_is_503_on_every_authenticated_route(
    secret: str | None, auth: str | None, path: str
) -> None:
    response = _refused(_decide(path, auth=auth, secret=secret), 503)
    problem = json.loads(response.body)
    assert problem["type"] == "urn:threadline:problem:auth-unconfigured"
    assert edge.TOKEN_SECRET in problem["detail"]


def test_valid_requests_go_to_the_space_object() -> None:
    decision = _forwarded(_decide("/v1/spaces/acme.prod:eu/threads/t-1/submissions",
                                  method="POST", length=10))
    assert decision.object_name == "acme.prod:eu"
    assert "authorization" not in decision.headers


@pytest.mark.parametrize("path", ["/v1/spaces/acme/threads/bad id", "/v1/spaces/ac%2Fme/threads",
                                  "/v1/spaces/./threads", "/v1/spaces/../threads",
                                  "/v1/spaces/acme/threads/..", "/v1/spaces/acme/threads/.",
                                  "/v1/spaces/" + "a" * 129 + "/threads"])
def test_bad_ids_are_400(path: str) -> None:
    response = _refused(_decide(path), 400)
    assert json.loads(response.body)["type"] == "urn:threadline:problem:invalid-id"


@pytest.mark.parametrize("path", ["/v1/spaces//threads", "/v1/spaces/acme", "/v2/other"])
def test_paths_no_route_matches_are_404_once_authenticated(path: str) -> None:
    _refused(_decide(path), 404)
    _refused(_decide(path, auth=None), 401)


def test_dotted_ids_that_are_not_dot_segments_pass() -> None:
    decision = _forwarded(_decide("/v1/spaces/a..b/threads/.hidden"))
    assert decision.object_name == "a..b"


def test_big_bodies_are_413() -> None:
    path = "/v1/spaces/acme/threads/t/submissions"
    _refused(_decide(path, method="POST", length=1_025), 413)
    _forwarded(_decide(path, method="POST", length=1_024))


def test_token_comparison_uses_the_whole_secret() -> None:
    assert edge.token_matches(f"Bearer {SECRET}", SECRET)
    assert edge.token_matches(f"bearer {SECRET}", SECRET)
    assert not edge.token_matches(f"Bearer {SECRET[:-1]}", SECRET)
    assert not edge.token_matches("Bearer ", "")
    assert not edge.token_matches(f"Bearer {SECRET}", None)
    assert edge.bearer("Bearer two words") == "two words"


def _stream(sizes: list[int]) -> tuple[list[int], object]:
    pulled: list[int] = []

    async def next_chunk() -> bytes | None:
        if len(pulled) == len(sizes):
            return None
        pulled.append(sizes[len(pulled)])
        return b"x" * pulled[-1]

    return pulled, next_chunk


def test_a_streamed_body_is_read_whole_up_to_the_cap() -> None:
    _, next_chunk = _stream([400, 400, 224])
    assert asyncio.run(edge.read_capped(next_chunk, 1_024)) == b"x" * 1_024  # type: ignore[arg-type]


def test_a_streamed_body_stops_being_read_past_the_cap() -> None:
    pulled, next_chunk = _stream([600, 600, 600, 600])
    assert asyncio.run(edge.read_capped(next_chunk, 1_024)) is None  # type: ignore[arg-type]
    assert pulled == [600, 600]  # nothing is pulled after the cap is passed
