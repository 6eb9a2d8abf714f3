"""HttpxPort: the outbound HTTP port under CPython, against a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time

import pytest
from destination_support import NOW_MS, context, records
from local_server import Answer, local_server

import threadline
from threadline.delivery.outbound import RESPONSE_BODY_LIMIT, HttpxPort, OutboundTimeout
from threadline.delivery.webhooks import WebhookUnavailable
from threadline.errors import DeliveryRefused


def _post(url: str, body: bytes = b"{}", timeout_ms: int = 5_000,
          headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return asyncio.run(HttpxPort().post(
        url, headers=headers or {"content-type": "application/json"}, body=body,
        timeout_ms=timeout_ms))


def test_a_post_reaches_the_server_and_its_answer_comes_back() -> None:
    with local_server(lambda _: Answer(201, b"created", {"X-Reply": "yes"})) as server:
        response = _post(server.url + "/hook", b'{"a":1}', headers={"x-custom": "1"})
    [received] = server.received
    assert (received.path, received.body, received.headers["x-custom"]) == (
        "/hook", b'{"a":1}', "1")
    assert (response.status, response.body, response.headers["x-reply"]) == (
        201, b"created", "yes")


def test_only_the_start_of_a_large_answer_is_kept() -> None:
    with local_server(lambda _: Answer(500, b"x" * (RESPONSE_BODY_LIMIT * 4))) as server:
        response = _post(server.url)
    assert response.status == 500 and response.body == b"x" * RESPONSE_BODY_LIMIT


def test_a_redirect_is_returned_not_followed() -> None:
    with local_server(lambda _: Answer(302, headers={"Location": "/elsewhere"})) as server:
        response = _post(server.url)
    assert response.status == 302 and len(server.received) == 1


def test_a_server_that_does_not_answer_in_time_raises_outbound_timeout() -> None:
    release = threading.Event()
    try:
        with local_server(lambda _: Answer(hold=release)) as server:
            started = time.monotonic()
            with pytest.raises(OutboundTimeout, match="within 200 ms"):
                _post(server.url, timeout_ms=200)
            assert time.monotonic() - started < 5
    finally:
        release.set()


def test_a_refused_connection_is_an_error_other_than_a_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(Exception) as caught:
        _post(f"http://127.0.0.1:{port}/", timeout_ms=2_000)
    assert not isinstance(caught.value, OutboundTimeout)


def test_a_webhook_through_httpx_delivers_a_batch_the_receiver_verifies() -> None:
    app = threadline.Application()

    def receive(request):  # type: ignore[no-untyped-def]
        try:
            threadline.verify_signature(request.body, request.headers["threadline-signature"],
                                        "whsec", now=NOW_MS / 1000)
        except threadline.SignatureInvalid:
            return Answer(401, b"bad signature")
        return Answer(200)

    with local_server(receive) as server:
        good = app.webhook("crm", url=server.url + "/in", secret_env="SECRET")
        asyncio.run(good.deliver(records(2), context({"SECRET": "whsec"}, HttpxPort())))
        with pytest.raises(DeliveryRefused) as caught:
            asyncio.run(good.deliver(records(1), context({"SECRET": "wrong"}, HttpxPort())))
    assert caught.value.detail == "HTTP 401: bad signature"
    first = json.loads(server.received[0].body)
    assert [r["seq"] for r in first["records"]] == [1, 2]
    assert server.received[0].headers["idempotency-key"]


def test_a_webhook_without_an_http_port_uses_httpx() -> None:
    app = threadline.Application()
    with local_server(lambda _: Answer(503, b"later")) as server:
        spec = app.webhook("crm", url=server.url, secret_env="SECRET")
        with pytest.raises(WebhookUnavailable, match="HTTP 503: later"):
            asyncio.run(spec.deliver(records(1), context({"SECRET": "s"}, None)))
    assert len(server.received) == 1


def test_importing_threadline_never_imports_httpx() -> None:
    code = ("import sys, threadline, threadline.delivery.webhooks, threadline.delivery.queues, "
            "threadline.delivery.outbound; print('httpx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
