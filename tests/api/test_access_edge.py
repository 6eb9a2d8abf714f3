"""Scoped tokens and the authorize hook at the Worker's edge, in front of a real space."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from api_support import Api, run
from edge_support import API_TOKEN, KEYS, ORIGIN, T1, Worker
from edge_support import problem_of as _problem

from threadline import AccessRequest, Capability, Principal, access
from threadline.api import edge
from threadline.api.edge import EXPECTED_CREDENTIAL
from threadline.api.http import Request, Response
from threadline.api.routes import ROUTES


@pytest.fixture
def worker(api: Api) -> Worker:
    return Worker(api)


def test_a_read_token_opens_its_space_and_is_refused_on_another(worker: Worker) -> None:
    token = worker.mint(capabilities=("read",))
    assert worker.call("GET", T1, token=token).status == 200
    other = _problem(worker.call("GET", "/v1/spaces/other/threads/t1", token=token), 403)
    assert other["type"] == "urn:threadline:problem:forbidden"
    assert "acme" not in json.dumps(other) and "other" not in json.dumps(other)


def test_a_token_scoped_to_a_thread_opens_only_that_thread(worker: Worker) -> None:
    token = worker.mint(thread="t1")
    assert worker.call("GET", T1 + "/history", token=token).status == 200
    assert worker.call("GET", T1 + "/events", token=token).status == 200
    for path in ("/v1/spaces/acme/threads/t2", "/v1/spaces/acme/threads/t2/events",
                 "/v1/spaces/acme/threads"):
        _problem(worker.call("GET", path, token=token), 403)


def test_refusals_for_another_space_and_a_missing_resource_read_the_same(
    worker: Worker
) -> None:
    token = worker.mint(thread="t1")
    elsewhere = worker.call("GET", "/v1/spaces/other/threads/t1", token=token)
    sibling = worker.call("GET", "/v1/spaces/acme/threads/t2", token=token)
    assert elsewhere.body == sibling.body and elsewhere.status == sibling.status == 403


def _sample_path(template: str) -> str:
    return (template.replace("{space}", "acme").replace("{thread}", "t1")
            .replace("{submission}", "sub_1").replace("{key}", "k")
            .replace("{subscriber}", "crm").replace("{lane}", "threadline:messages"))


@pytest.mark.parametrize("route", [r for r in ROUTES if r.capability is not None],
                         ids=lambda r: r.operation_id)
@pytest.mark.parametrize("capability", list(Capability), ids=str)
def test_each_route_needs_its_own_capability(
    worker: Worker, route: Any, capability: Capability
) -> None:
    token = worker.mint(capabilities=(capability.value,))
    checks = worker.edge
    outcome = run(checks.admit(route.method, "https://t.test" + _sample_path(route.template),
                               {"authorization": f"Bearer {token}"}))
    if capability == route.capability and route.operation_id != "mintToken":
        assert isinstance(outcome, edge.Forward) and outcome.object_name == "acme"
    elif route.operation_id == "mintToken":
        # Minting is answered at the edge; its reach is checked against the body.
        assert isinstance(outcome, edge.Forward) and outcome.object_name is None
    else:
        assert isinstance(outcome, Response) and outcome.status == 403


def test_a_token_can_submit_only_with_the_submit_capability(worker: Worker) -> None:
    reader = worker.mint(thread="t1")
    _problem(worker.call("POST", T1 + "/submissions", {"input": {"text": "x"}, "agent": "echo"},
                         token=reader), 403)
    assert worker.api.dump()["tl_submissions"] == []
    writer = worker.mint(thread="t1", capabilities=("submit",))
    assert worker.call("POST", T1 + "/submissions", {"input": {"text": "x"}, "agent": "echo"},
                       token=writer).status == 202


def test_an_expired_token_is_401_and_says_so(worker: Worker) -> None:
    token = worker.mint(ttl=timedelta(seconds=10))
    worker.api.clock.advance(10_000 + 30_000)
    problem = _problem(worker.call("GET", T1, token=token), 401)
    assert problem["detail"] == "the token has expired"
    assert token not in json.dumps(problem)


def test_a_token_of_another_deployment_is_401_saying_only_what_is_expected(
    worker: Worker,
) -> None:
    forged = access.mint("k1:" + "z" * 40, space="acme", now_ms=worker.api.clock.now_ms())
    problem = _problem(worker.call("GET", T1, token=forged), 401)
    assert problem["detail"] == EXPECTED_CREDENTIAL


def test_the_query_token_opens_the_event_stream_only(worker: Worker) -> None:
    token = worker.mint(capabilities=("read", "submit"))
    assert worker.call("GET", T1 + f"/events?access_token={token}").status == 200
    _problem(worker.call("GET", T1 + f"/history?access_token={token}"), 401)
    _problem(worker.call("POST", T1 + f"/submissions?access_token={token}",
                         {"input": {"text": "x"}, "agent": "echo"}), 401)


def test_the_token_never_reaches_the_object_logs_error_bodies_or_location(
    worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = worker.mint(capabilities=("read", "submit"))
    expired = access.mint(KEYS, space="acme", now_ms=0)
    answers = [
        worker.call("GET", T1 + f"/events?access_token={token}&after=0"),
        worker.call("POST", T1 + f"/submissions?access_token={token}",
                    {"input": {"text": "x"}, "agent": "echo"}, token=token),
        worker.call("GET", T1 + "/submissions/nope", token=token),
        worker.call("GET", T1 + f"/events?access_token={expired}"),
        worker.call("GET", T1 + f"/events?access_token={token[:-3]}"),
        worker.call("GET", "/v1/spaces/other/threads/t1/events?access_token=" + token),
    ]
    assert [a.status for a in answers] == [200, 202, 404, 401, 401, 403]
    for answer in answers:
        assert token not in answer.body.decode() and expired not in answer.body.decode()
        assert all(token not in value for value in answer.headers.values())
    assert answers[1].headers["location"].startswith("/v1/spaces/acme/threads/t1/submissions/")
    for _, request in worker.sent:
        assert "access_token" not in request.query and "authorization" not in request.headers
        assert token not in json.dumps(request.headers)
    assert worker.sent[0][1].query == {"after": ["0"]}
    assert token not in caplog.text and expired not in caplog.text


def test_client_sent_threadline_headers_are_dropped_and_the_subject_is_set(
    worker: Worker
) -> None:
    token = worker.mint(capabilities=("read",), subject="user:42")
    worker.call("GET", T1, token=token, headers={
        access.SUBJECT_HEADER: "admin", access.STREAM_KEY_HEADER: "", "threadline-x": "1"})
    _, request = worker.sent[-1]
    assert request.headers[access.SUBJECT_HEADER] == "user:42"
    assert request.headers[access.STREAM_KEY_HEADER] == "subject:user:42"
    assert "threadline-x" not in request.headers
    worker.call("GET", T1, token=API_TOKEN, headers={access.SUBJECT_HEADER: "admin"})
    _, request = worker.sent[-1]
    assert access.SUBJECT_HEADER not in request.headers
    assert access.STREAM_KEY_HEADER not in request.headers  # the operator is not capped


def test_the_api_token_still_opens_everything(worker: Worker) -> None:
    assert worker.call("GET", "/v1/spaces/acme/maintenance", token=API_TOKEN).status == 200
    assert worker.call("GET", "/v1/spaces/zeta/threads", token=API_TOKEN).status == 200


# -- the authorize hook ------------------------------------------------------------------


def test_the_hook_decides_for_credentials_it_understands(api: Api) -> None:
    seen: list[AccessRequest] = []

    async def hook(request: AccessRequest) -> Principal | None:
        seen.append(request)
        if request.headers.get("cookie") != "session=alice":
            return None
        return Principal(subject="alice", space="acme", capabilities={"read", "submit"})

    worker = Worker(api, hook=hook, keys=None, api_token=None)
    _problem(worker.call("GET", T1), 401)
    alice = {"cookie": "session=alice", access.SUBJECT_HEADER: "mallory"}
    assert worker.call("POST", T1 + "/submissions", {"input": {"text": "hi"}, "agent": "echo"},
                       headers=alice).status == 202
    assert worker.sent[-1][1].headers[access.SUBJECT_HEADER] == "alice"
    _problem(worker.call("GET", "/v1/spaces/acme/maintenance", headers=alice), 403)
    _problem(worker.call("GET", "/v1/spaces/other/threads/t1", headers=alice), 403)
    request = seen[1]
    assert (request.method, request.route, request.capability, request.space,
            request.thread) == ("POST", "submit", Capability.SUBMIT, "acme", "t1")
    assert access.SUBJECT_HEADER not in request.headers


def test_a_hook_that_raises_answers_500_without_detail_never_open_access(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    async def hook(request: AccessRequest) -> Principal | None:
        raise RuntimeError("session store down: secret-detail")

    worker = Worker(api, hook=hook, keys=None, api_token=None)
    problem = _problem(worker.call("GET", T1), 500)
    assert "detail" not in problem and "secret-detail" not in json.dumps(problem)
    assert worker.sent == []
    assert "session store down" in caplog.text


def test_a_hook_answering_something_else_than_a_principal_is_a_500(api: Api) -> None:
    async def hook(request: AccessRequest) -> Any:
        return True

    worker = Worker(api, hook=hook, keys=None, api_token=None)
    _problem(worker.call("GET", T1), 500)
    assert worker.sent == []


def test_the_hook_is_not_asked_when_a_threadline_credential_decides(api: Api) -> None:
    asked: list[AccessRequest] = []

    async def hook(request: AccessRequest) -> Principal | None:
        asked.append(request)
        return None

    worker = Worker(api, hook=hook)
    assert worker.call("GET", T1, token=API_TOKEN).status == 200
    assert worker.call("GET", T1, token=worker.mint()).status == 200
    _problem(worker.call("GET", T1, token=worker.mint()[:-2]), 401)
    assert asked == []


def test_a_deployment_with_only_signing_keys_accepts_tokens_and_refuses_the_rest(
    api: Api
) -> None:
    worker = Worker(api, api_token=None)
    assert worker.call("GET", T1, token=worker.mint()).status == 200
    _problem(worker.call("GET", T1, token="anything"), 401)


# -- minting over HTTP ---------------------------------------------------------------------


def test_the_operator_mints_a_token_over_http_that_then_works(worker: Worker) -> None:
    answer = worker.call("POST", "/v1/tokens", {"space": "acme", "thread": "t1",
                                                "capabilities": ["read"], "ttl_seconds": 60,
                                                "subject": "user:7"}, token=API_TOKEN)
    assert answer.status == 201, answer.body
    grant = answer.json()
    assert grant["space"] == "acme" and grant["thread"] == "t1" and grant["subject"] == "user:7"
    assert worker.call("GET", T1, token=grant["token"]).status == 200
    _problem(worker.call("GET", "/v1/spaces/acme/threads/t2", token=grant["token"]), 403)
    assert worker.sent and all(name == "acme" for name, _ in worker.sent)


def test_a_scoped_admin_mints_only_within_its_own_reach(worker: Worker) -> None:
    admin = worker.mint(capabilities=("admin", "read"))
    assert worker.call("POST", "/v1/tokens", {"space": "acme", "thread": "t9"},
                       token=admin).status == 201
    for body in ({"space": "other"}, {"space": "acme", "capabilities": ["submit"]}):
        _problem(worker.call("POST", "/v1/tokens", body, token=admin), 403)
    reader = worker.mint(capabilities=("read",))
    _problem(worker.call("POST", "/v1/tokens", {"space": "acme"}, token=reader), 403)


def test_minting_refuses_bad_requests_and_needs_signing_keys(api: Api) -> None:
    worker = Worker(api)
    problem = _problem(worker.call("POST", "/v1/tokens", {"space": "acme", "ttl_seconds": 0},
                                   token=API_TOKEN), 422)
    assert problem["field"] == "ttl_seconds"
    _problem(worker.call("POST", "/v1/tokens", {"space": "acme", "capabilities": ["root"]},
                         token=API_TOKEN), 422)
    without = Worker(api, keys=None)
    _problem(without.call("POST", "/v1/tokens", {"space": "acme"}, token=API_TOKEN), 503)


# -- browsers ----------------------------------------------------------------------------


def test_allowed_origins_may_read_answers_and_refusals(worker: Worker) -> None:
    token = worker.mint()
    ok = worker.call("GET", T1 + f"/events?access_token={token}", headers={"origin": ORIGIN})
    refused = worker.call("GET", T1, headers={"origin": ORIGIN})
    for answer in (ok, refused):
        assert answer.headers["access-control-allow-origin"] == ORIGIN
    stranger = worker.call("GET", T1, token=token, headers={"origin": "https://evil.example"})
    assert "access-control-allow-origin" not in stranger.headers


def test_a_preflight_from_an_allowed_origin_is_answered_without_credentials(
    worker: Worker
) -> None:
    answer = worker.call("OPTIONS", T1 + "/submissions", headers={
        "origin": ORIGIN, "access-control-request-method": "POST"})
    assert answer.status == 204
    assert "authorization" in answer.headers["access-control-allow-headers"]
    assert worker.sent == []
    stranger = worker.call("OPTIONS", T1 + "/submissions", headers={
        "origin": "https://evil.example", "access-control-request-method": "POST"})
    assert stranger.status == 401


def test_the_client_works_with_a_scoped_token(worker: Worker) -> None:
    import asyncio

    import httpx

    from threadline import Forbidden
    from threadline.client import Client

    async def answer(request: httpx.Request) -> httpx.Response:
        plain = Request.from_url(request.method, str(request.url), dict(request.headers),
                                 request.content)
        reply = await worker.edge.serve(plain, lambda name, r: worker.api.space.handle(r))
        return httpx.Response(reply.status, headers=reply.headers, content=reply.body)

    token = worker.mint(thread="t1", capabilities=("read", "submit"), subject="user:1")
    transport = httpx.MockTransport(lambda request: asyncio.run(answer(request)))
    with Client("http://threadline.test", token=token, transport=transport) as client:
        submitted = client.submit("acme", "t1", {"text": "hi"}, agent="echo")
        worker.api.drive()
        assert client.get_submission("acme", "t1", submitted.id).result == {"text": "hi"}
        with pytest.raises(Forbidden):
            client.submit("acme", "t2", {"text": "no"}, agent="echo")
        with pytest.raises(Forbidden):
            client.abort("acme", "t1", submitted.id)


def test_the_api_token_is_compared_in_constant_time(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = edge.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(edge.hmac, "compare_digest", spy)
    assert worker.call("GET", T1, token=API_TOKEN).status == 200
    _problem(worker.call("GET", T1, token=API_TOKEN[:-1]), 401)
    assert compared == [(API_TOKEN.encode(), API_TOKEN.encode()),
                        (API_TOKEN[:-1].encode(), API_TOKEN.encode())]


# -- what the edge forwards, and how it reads its configuration ----------------------------


def test_ordinary_headers_reach_the_object_and_hop_headers_do_not(worker: Worker) -> None:
    worker.call("GET", T1 + "/events", token=API_TOKEN, headers={
        "last-event-id": "3", "accept": "text/event-stream", "connection": "keep-alive"})
    _, request = worker.sent[-1]
    assert request.headers["last-event-id"] == "3"
    assert request.headers["accept"] == "text/event-stream"
    assert "connection" not in request.headers


def test_the_query_token_is_found_among_other_parameters(worker: Worker) -> None:
    token = worker.mint()
    answer = worker.call("GET", T1 + f"/events?after=0&access_token={token}&x=")
    assert answer.status == 200
    assert worker.sent[-1][1].query == {"after": ["0"], "x": [""]}


def test_a_method_the_route_lacks_is_405_naming_the_allowed_ones(worker: Worker) -> None:
    answer = worker.call("DELETE", T1, token=API_TOKEN)
    assert _problem(answer, 405)["type"] == "urn:threadline:problem:method-not-allowed"
    assert answer.headers["allow"] == "GET, HEAD"


def test_a_bad_id_is_named_in_the_refusal(worker: Worker) -> None:
    assert _problem(worker.call("GET", "/v1/spaces/acme/threads/a%20b", token=API_TOKEN),
                    400)["field"] == "thread"


def test_a_body_over_the_cap_is_refused_even_without_a_declared_length(api: Api) -> None:
    worker = Worker(api)
    cap = api.app.config.max_body_bytes
    path = T1 + "/submissions"

    def post(size: int) -> Response:
        request = Request.from_url("POST", path, {"authorization": f"Bearer {API_TOKEN}"},
                                   b"x" * size)
        return run(worker.edge.serve(request, lambda name, r: api.space.handle(r)))

    assert _problem(post(cap + 1), 413)["field"] == "body"
    assert post(cap).status == 400  # read and parsed: not JSON


def test_a_thread_scoped_admin_mints_only_for_its_thread(worker: Worker) -> None:
    admin = worker.mint(thread="t1", capabilities=("admin", "read"))
    grant = worker.call("POST", "/v1/tokens", {"space": "acme", "thread": "t1"}, token=admin)
    assert grant.status == 201 and grant.json()["capabilities"] == ["read"]
    _problem(worker.call("POST", "/v1/tokens", {"space": "acme", "thread": "t2"}, token=admin),
             403)
    _problem(worker.call("POST", "/v1/tokens", {"space": "acme"}, token=admin), 403)


def test_minted_tokens_carry_the_requested_subject(worker: Worker) -> None:
    grant = worker.call("POST", "/v1/tokens", {"space": "acme", "subject": "user:9"},
                        token=API_TOKEN).json()
    verified = access.verify(grant["token"], KEYS, now_ms=worker.api.clock.now_ms())
    assert verified.principal.subject == "user:9"
    assert grant["expires_at"] == verified.expires_at * 1000


def test_the_preflight_allows_the_methods_and_headers_the_api_uses(worker: Worker) -> None:
    answer = worker.call("OPTIONS", T1 + "/events", headers={
        "origin": ORIGIN, "access-control-request-method": "GET"})
    assert answer.headers["access-control-allow-methods"] == "GET, HEAD, POST"
    assert "last-event-id" in answer.headers["access-control-allow-headers"]
    assert int(answer.headers["access-control-max-age"]) > 0


class _Env:
    def __init__(self, **values: object) -> None:
        self.__dict__.update(values)


def test_the_edge_reads_its_secrets_and_origins_from_the_environment() -> None:
    config = edge.EdgeConfig.from_env(_Env(
        THREADLINE_API_TOKEN="tok", THREADLINE_SIGNING_KEYS=KEYS,
        THREADLINE_ALLOWED_ORIGINS=" https://a.example/ , https://b.example,"),
        max_body_bytes=10)
    assert config.api_token == "tok" and config.max_body_bytes == 10
    assert config.signing_keys is not None and config.signing_keys.current == "k1"
    assert config.allowed_origins == {"https://a.example", "https://b.example"}
    assert config.configured and config.signing_keys_error is None


def test_an_environment_without_strings_configures_nothing() -> None:
    config = edge.EdgeConfig.from_env(_Env(THREADLINE_API_TOKEN=object(),
                                           THREADLINE_SIGNING_KEYS=""))
    assert config.api_token is None and config.signing_keys is None
    assert not config.configured and config.allowed_origins == frozenset()
    hooked = edge.EdgeConfig.from_env(_Env(), authorize=_refuse_all)
    assert hooked.configured and hooked.authorize is _refuse_all


async def _refuse_all(request: AccessRequest) -> Principal | None:
    return None


def test_unreadable_signing_keys_refuse_every_token_and_say_why_in_the_log(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    config = edge.EdgeConfig.from_env(_Env(
        THREADLINE_API_TOKEN=API_TOKEN, THREADLINE_SIGNING_KEYS="k1:too-short-secret"))
    assert config.signing_keys is None and "shorter than 32" in (config.signing_keys_error or "")
    checks = edge.Edge(config, api.clock)
    token = access.mint(KEYS, space="acme", now_ms=api.clock.now_ms())
    refused = run(checks.admit("GET", "https://t.test" + T1,
                               {"authorization": f"Bearer {token}"}))
    assert isinstance(refused, Response) and refused.status == 401
    assert "THREADLINE_SIGNING_KEYS cannot be read" in caplog.text
    assert "too-short-secret" not in caplog.text
    minted = run(checks.admit("POST", "https://t.test/v1/tokens",
                              {"authorization": f"Bearer {API_TOKEN}"}))
    assert isinstance(minted, edge.Forward)
    problem = checks.answer(minted, b'{"space": "acme"}').json()
    assert problem["status"] == 503 and "THREADLINE_SIGNING_KEYS" in problem["detail"]


@pytest.mark.parametrize(("body", "field"), [
    ({"space": "acme", "subject": "\u0003"}, "subject"),
    ({"space": "acme", "subject": " padded "}, "subject"),
    ({"space": ".."}, "space"),
    ({"space": "acme", "thread": "."}, "thread"),
])
def test_minting_refuses_what_a_principal_could_not_hold_with_422(
    worker: Worker, body: dict[str, Any], field: str
) -> None:
    problem = _problem(worker.call("POST", "/v1/tokens", body, token=API_TOKEN), 422)
    assert problem["field"] == field
