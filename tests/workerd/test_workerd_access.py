"""Scoped tokens through the real Worker and object: a read token opens one Thread's event
stream (as ``?access_token=``, the way a browser's ``EventSource`` sends it) and nothing else."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from workerd_runtime import SIGNING_KEYS as KEYS
from workerd_runtime import TOKEN, Runtime, wait_for

from threadline import access

SPACE = "access-tests"
READ_TIMEOUT_S = 10.0


@pytest.fixture
def runtime(signed: Runtime) -> Runtime:
    return signed


def _thread(name: str, space: str = SPACE) -> str:
    return f"/v1/spaces/{space}/threads/{name}"


def _status(runtime: Runtime, method: str, path: str, token: str, body: object = None) -> int:
    raw = None if body is None else json.dumps(body).encode()
    return runtime.request(path, method=method, token=token, body=raw).status


def test_a_read_token_opens_one_threads_stream_and_nothing_else(runtime: Runtime) -> None:
    token = access.mint(KEYS, space=SPACE, thread="t1", subject="reader:1")
    with httpx.Client(base_url=runtime.url, timeout=READ_TIMEOUT_S) as client:
        submitted = client.post(
            _thread("t1") + "/submissions", headers={"authorization": f"Bearer {TOKEN}"},
            json={"agent": "echo", "input": {"text": "for the reader"}})
        assert submitted.status_code == 202, submitted.text
        with connect_sse(client, "GET", _thread("t1") + f"/events?access_token={token}") as sse:
            assert sse.response.status_code == 200
            for event in sse.iter_sse():
                if event.event == "record" and "for the reader" in event.data:
                    break
    assert _status(runtime, "GET", _thread("t2") + f"/events?access_token={token}", "") == 403
    assert _status(runtime, "GET", _thread("t1", "other") + f"/events?access_token={token}",
                   "") == 403
    assert _status(runtime, "POST", _thread("t1") + "/submissions", token,
                   {"agent": "echo", "input": {"text": "no"}}) == 403
    assert _status(runtime, "GET", _thread("t1") + "/history", token) == 200
    assert _status(runtime, "GET", _thread("t1") + f"/history?access_token={token}", "") == 401
    assert _status(runtime, "GET", f"/v1/spaces/{SPACE}/maintenance", token) == 403
    assert _status(runtime, "GET", _thread("t1"), token[:-4]) == 401


def test_the_operator_mints_a_token_over_http(runtime: Runtime) -> None:
    answer = runtime.request("/v1/tokens", method="POST", token=TOKEN, body=json.dumps(
        {"space": SPACE, "thread": "t3", "capabilities": ["read", "submit"]}).encode())
    assert answer.status == 201, answer.body
    minted = answer.json()["token"]
    assert _status(runtime, "POST", _thread("t3") + "/submissions", minted,
                   {"agent": "echo", "input": {"text": "minted"}}) == 202
    wait_for(lambda: runtime.request(_thread("t3"), token=minted).json()["open"] == [],
             timeout=READ_TIMEOUT_S, what="the minted token's submission to settle")
    assert _status(runtime, "GET", _thread("t4"), minted) == 403
    assert minted not in runtime.output()


def test_a_deployment_without_signing_keys_refuses_scoped_tokens(
    workerd: Runtime, tmp_path: Path
) -> None:
    token = access.mint(KEYS, space=SPACE)
    assert _status(workerd, "GET", _thread("t1"), token) == 401


def test_one_principal_is_capped_below_the_object_and_others_still_get_a_stream(
    runtime: Runtime
) -> None:
    # caps-* spaces: 3 streams per object, 2 per principal (tests/workerd/probe/probe_streams.py).
    space = "caps-access"
    alice = access.mint(KEYS, space=space, subject="alice")
    bob = access.mint(KEYS, space=space, subject="bob")
    url = f"/v1/spaces/{space}/threads/t1/events?access_token="
    with httpx.Client(base_url=runtime.url, timeout=READ_TIMEOUT_S) as client:
        held: list[httpx.Response] = []
        try:
            for token in (alice, alice):
                reply = client.send(client.build_request("GET", url + token), stream=True)
                held.append(reply)
                assert reply.status_code == 200
            third = client.get(url + alice, headers={"threadline-stream-key": "forged"})
            assert third.status_code == 429 and third.headers["retry-after"].isdigit()
            assert third.json()["type"] == "urn:threadline:problem:too-many-streams"
            reply = client.send(client.build_request("GET", url + bob), stream=True)
            held.append(reply)
            assert reply.status_code == 200
            full = client.get(url + bob)
            assert full.status_code == 503
            assert full.json()["type"] == "urn:threadline:problem:streams-exhausted"
        finally:
            for reply in held:
                reply.close()


def test_a_revoked_token_is_refused_through_the_worker_at_once_and_after_a_restart(
    start_runtime: Any, tmp_path: Path
) -> None:
    state = tmp_path / "revocation-state"
    runtime = start_runtime(state, THREADLINE_SIGNING_KEYS=KEYS)
    space = "revocation-tests"
    leaked = access.mint(KEYS, space=space, subject="user:leaky")
    kept = access.mint(KEYS, space=space, subject="user:careful")
    assert _status(runtime, "GET", _thread("t1", space), leaked) == 200
    token_id = access.verify(leaked, KEYS, now_ms=int(time.time() * 1000)).token_id
    revoked_at = time.monotonic()
    answer = runtime.request(f"/v1/spaces/{space}/revocations", method="POST", token=TOKEN,
                             body=json.dumps({"token_id": token_id}).encode())
    assert answer.status == 201, answer.body
    refused = runtime.request(_thread("t1", space), token=leaked)
    took = time.monotonic() - revoked_at
    assert refused.status == 401 and refused.json()["detail"] == "the token has been revoked"
    assert _status(runtime, "GET", _thread("t1", space), kept) == 200
    runtime.stop()
    again = start_runtime(state, THREADLINE_SIGNING_KEYS=KEYS)
    assert _status(again, "GET", _thread("t1", space), leaked) == 401
    assert _status(again, "GET", _thread("t1", space), kept) == 200
    listed = again.request(f"/v1/spaces/{space}/revocations", token=TOKEN).json()
    assert [r["token_id"] for r in listed["revocations"]] == [token_id]
    assert leaked not in again.output() and leaked not in runtime.output()
    print(f"revocation: refused {took * 1000:.0f} ms after the POST was sent")
