"""threadline.client over httpx.MockTransport, routed through the edge checks into a Space."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from api_support import Api

from threadline import Conflict, NotFound, Unauthorized, ValidationFailed
from threadline.access import SigningKeys, mint
from threadline.api import edge
from threadline.api.http import Request
from threadline.client import AsyncClient, Client, WaitTimeout

TOKEN = "client-test-token-" + "c" * 32
BASE = "http://threadline.test"


async def _answer(api: Api, request: httpx.Request) -> httpx.Response:
    """What the Worker does: edge checks, then the object named by the space."""
    reply = await _edge(api).serve(
        Request.from_url(request.method, str(request.url), dict(request.headers), request.content),
        lambda name, forwarded: api.space.handle(forwarded))
    return httpx.Response(reply.status, headers=reply.headers, content=reply.body)


def _edge(api: Api) -> edge.Edge:
    return edge.Edge(
        edge.EdgeConfig(api_token=TOKEN, max_body_bytes=api.app.config.max_body_bytes), api.clock)


def _client(api: Api, token: str = TOKEN, **kwargs: Any) -> Client:
    transport = httpx.MockTransport(lambda request: asyncio.run(_answer(api, request)))
    return Client(BASE, token, transport=transport, **kwargs)


def test_the_blocking_client_covers_a_whole_flow(api: Api) -> None:
    with _client(api) as client:
        echo = client.submit("acme", "t1", {"text": "hi"}, agent="echo", idempotency_key="k")
        assert echo.state == "queued" and echo.seq == 1
        again = client.submit("acme", "t1", {"text": "hi"}, agent="echo", idempotency_key="k")
        assert again.id == echo.id
        confirm = client.submit("acme", "t2", {"text": "go"}, agent="confirm")
        api.drive()
        assert client.get_submission("acme", "t1", echo.id).result == {"text": "hi"}
        decided = client.approve("acme", "t2", confirm.id, "confirm", approved=True)
        assert decided.approved is True and decided.state == "ready"
        api.drive()
        assert client.wait("acme", "t2", confirm.id, timeout=1).result == {"approved": True}
        page = client.history("acme", "t1", limit=10)
        assert [(r.kind, r.body) for r in page.records] == [
            ("record", {"role": "assistant", "text": "hi"}),
            ("submission.settled", {"submission_id": echo.id, "outcome": "completed",
                                    "result": {"text": "hi"}})]
        assert [t.id for t in client.threads("acme").threads] == ["t1", "t2"]
        assert client.thread("acme", "t1").open == []
        queued = client.submit("acme", "t1", {"text": "later"})
        aborted = client.abort("acme", "t1", queued.id, reason="changed my mind")
        assert aborted.outcome == "aborted" and aborted.abort is not None


def test_problems_raise_the_library_errors(api: Api) -> None:
    with _client(api) as client:
        client.submit("acme", "t1", {"text": "hi"}, agent="echo", idempotency_key="k")
        with pytest.raises(Conflict) as conflict:
            client.submit("acme", "t1", {"text": "no"}, agent="echo", idempotency_key="k")
        assert conflict.value.field == "idempotency_key" and conflict.value.status == 409
        assert conflict.value.extra["problem"]["type"] == "urn:threadline:problem:conflict"
        with pytest.raises(ValidationFailed) as invalid:
            client.submit("acme", "t1", {"text": "x"}, agent="nope")
        assert invalid.value.status == 422 and invalid.value.field == "agent"
        with pytest.raises(NotFound):
            client.get_submission("acme", "t1", "sub_missing")
        with pytest.raises(ValidationFailed) as bad_id:
            client.thread("acme", "a b")
        assert bad_id.value.status == 400
    with _client(api, token="wrong") as client, pytest.raises(Unauthorized):
        client.thread("acme", "t1")


def test_wait_gives_up_at_its_deadline_without_sleeping(api: Api) -> None:
    now = [0.0]
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        now[0] += seconds

    with _client(api, sleep=sleep, monotonic=lambda: now[0]) as client:
        sub = client.submit("acme", "t1", {"text": "x"}, agent="echo")
        with pytest.raises(WaitTimeout):
            client.wait("acme", "t1", sub.id, timeout=1.0, interval=0.25)
    assert naps == [0.25] * 4


def test_the_async_client_resolves_and_aborts(api: Api) -> None:
    async def scenario() -> None:
        transport = httpx.MockTransport(lambda request: _answer(api, request))
        async with AsyncClient(BASE, TOKEN, transport=transport) as client:
            sub = await client.submit("acme", "t1", {"text": "x"}, agent="confirm")
            detail = await client.get_submission("acme", "t1", sub.id)
            assert detail.state == "queued"
            with pytest.raises(Conflict):
                await client.resolve("acme", "t1", sub.id, "accept", {"ok": True})
            aborted = await client.abort("acme", "t1", sub.id)
            assert aborted.outcome == "aborted"
            done = await client.wait("acme", "t1", sub.id, timeout=0)
            assert done.state == "settled"
            page = await client.history("acme", "t1")
            # Aborted before it ran: its settlement is the Thread's only record.
            assert [(r.kind, r.body["outcome"]) for r in page.records] == [
                ("submission.settled", "aborted")] and page.next is None
            assert (await client.threads("acme")).threads[0].id == "t1"
            assert (await client.thread("acme", "t1")).open == []

    asyncio.run(scenario())


def test_the_worker_path_never_imports_the_client_or_httpx() -> None:
    code = (
        "import sys, threadline, threadline.space, threadline.api.routes, threadline.api.edge;"
        "print(sorted(m for m in sys.modules if m == 'httpx' or m.startswith('threadline.client')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.strip()
    assert out == "[]"


def test_both_clients_revoke_a_token_and_a_subject_and_list_them(api: Api) -> None:
    keys = "k1:" + "r" * 40
    checks = edge.Edge(edge.EdgeConfig(api_token=TOKEN, signing_keys=SigningKeys.parse(keys),
                                       max_body_bytes=api.app.config.max_body_bytes), api.clock)

    async def answer(request: httpx.Request) -> httpx.Response:
        reply = await checks.serve(
            Request.from_url(request.method, str(request.url), dict(request.headers),
                             request.content),
            lambda name, forwarded: api.space.handle(forwarded))
        return httpx.Response(reply.status, headers=reply.headers, content=reply.body)

    leaked = mint(keys, space="acme", now_ms=api.clock.now_ms(), token_id="leaked-1")
    transport = httpx.MockTransport(lambda request: asyncio.run(answer(request)))
    with Client(BASE, TOKEN, transport=transport) as client:
        made = client.revoke_token("acme", "leaked-1", reason="pasted in chat")
        assert (made.token_id, made.reason) == ("leaked-1", "pasted in chat")
    with Client(BASE, leaked, transport=transport) as holder, pytest.raises(Unauthorized):
        holder.thread("acme", "t1")

    async def go() -> None:
        async with AsyncClient(BASE, TOKEN, transport=httpx.MockTransport(answer)) as client:
            cut = await client.revoke_subject("acme", "user:alice", issued_before=datetime(
                2023, 11, 14, 22, 13, 20, tzinfo=UTC), reason="left the company")
            assert cut.issued_before == 1_700_000_000_000
            listed = await client.revocations("acme")
            assert [(r.token_id, r.subject) for r in listed] == [
                ("leaked-1", None), (None, "user:alice")]

    asyncio.run(go())
