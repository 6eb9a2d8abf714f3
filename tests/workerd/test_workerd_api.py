"""The thread API through the real Worker and object (src/entry.py as shipped) over HTTP.

These tests cover admission, reads, every edge refusal and a run the object's alarm settles;
the approval, abort, resolve, event-stream and restart flows are in test_workerd_flows.py.
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workerd_runtime import TOKEN, Runtime, wait_for

THREAD = "/v1/spaces/api-tests/threads/t1"


def _post(runtime: Runtime, path: str, payload: Any, token: str | None = TOKEN) -> Any:
    return runtime.request(path, method="POST", token=token, body=json.dumps(payload).encode())


def test_submit_replay_conflict_and_read_back(workerd: Runtime) -> None:
    payload = {"agent": "echo", "input": {"text": "hi"}, "idempotency_key": "wk-1"}
    admitted = _post(workerd, THREAD + "/submissions", payload)
    assert admitted.status == 202, admitted.body
    body = admitted.json()
    # Location survives the hop from the object through the Worker.
    location = admitted.headers["Location"]
    assert location == f"{THREAD}/submissions/{body['id']}"
    replay = _post(workerd, THREAD + "/submissions", payload)
    assert replay.status == 200 and replay.json()["id"] == body["id"]
    conflict = _post(workerd, THREAD + "/submissions", {**payload, "input": {"text": "no"}})
    assert conflict.status == 409
    assert conflict.json()["type"] == "urn:threadline:problem:conflict"

    def settled() -> Any:
        detail = workerd.request(location, token=TOKEN)
        assert detail.status == 200
        return detail.json() if detail.json()["state"] == "settled" else None

    # The object's alarm runs the echo agent: one journaled step, then settled.
    done = wait_for(settled, timeout=30, what="the echo run to settle")
    assert done["outcome"] == "completed" and done["result"] == {"text": "hi"}
    assert done["journal"]["steps"] == 1
    summary = workerd.request(THREAD, token=TOKEN).json()
    assert body["id"] not in [s["id"] for s in summary["open"]]
    report = workerd.request("/v1/spaces/api-tests/maintenance", token=TOKEN)
    assert report.status == 200 and report.json()["generation"]["dirty"] >= 1


def _oversized_post(
    runtime: Runtime,
    path: str,
    body: Callable[[], Any],
    headers: dict[str, str] | None = None,
) -> Any:
    """POST a body (made afresh by ``body()`` for each try) that the Worker refuses unread.

    The server may answer and close while the client is still writing the body, which a plain
    client reports as a broken pipe instead of the answer. Only such a lost answer is retried
    (a few times); the test still needs a real answer to assert on.
    """
    for _ in range(5):
        try:
            return runtime.request(path, method="POST", token=TOKEN, body=body(),
                                   headers=headers)
        except urllib.error.URLError as error:
            if not isinstance(error.reason, (BrokenPipeError, ConnectionResetError)):
                raise
    raise AssertionError("every try lost the answer to a broken pipe")


def test_the_largest_cursor_the_api_takes_reaches_storage_as_a_number(workerd: Runtime) -> None:
    # 2**53 - 1 would cross into JavaScript as a BigInt, which the SQL binding refuses.
    for after in (2**53 - 1, 2**52 + 1):
        reply = workerd.request(f"{THREAD}/history?after={after}&limit=5", token=TOKEN)
        assert reply.status == 200, reply.body
        assert reply.json()["records"] == []


def test_the_root_answers_a_page_for_a_person_without_a_credential(workerd: Runtime) -> None:
    reply = workerd.request("/", token=None)
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "text/html; charset=utf-8"
    page = reply.body.decode()
    assert "durable agent threads" in page and 'href="/v1/health"' in page


def test_the_worker_refuses_bad_tokens_ids_and_sizes(workerd: Runtime) -> None:
    for token in (None, "wrong"):
        reply = _post(workerd, THREAD + "/submissions", {"input": 1}, token=token)
        assert reply.status == 401
        assert "Authorization: Bearer <token>" in reply.json()["detail"]
        assert reply.headers["WWW-Authenticate"].startswith('Bearer realm="threadline"')
    # The runtime's URL parser resolves an encoded dot segment before the Worker sees it: the
    # path becomes /v1/spaces/api-tests/, which is no route (edge and router refuse '..' too).
    dots = workerd.request("/v1/spaces/api-tests/threads/%2E%2E", token=TOKEN)
    assert dots.status == 404, (dots.status, dots.body)
    bad_id = workerd.request("/v1/spaces/api-tests/threads/a%20b", token=TOKEN)
    assert bad_id.status == 400
    assert bad_id.json()["type"] == "urn:threadline:problem:invalid-id"
    big = _oversized_post(workerd, THREAD + "/submissions",
                          lambda: b"{" + b" " * 1_048_576 + b"}")
    assert big.status == 413
    assert big.json()["type"] == "urn:threadline:problem:payload-too-large"


def test_problems_pass_through_the_worker(workerd: Runtime) -> None:
    bad_json = workerd.request(THREAD + "/submissions", method="POST", token=TOKEN, body=b"{")
    assert bad_json.status == 400
    assert bad_json.headers["Content-Type"] == "application/problem+json"
    invalid = _post(workerd, THREAD + "/submissions", {"agent": "echo"})
    assert invalid.status == 422 and invalid.json()["field"] == "input"
    wrong_method = workerd.request(THREAD, method="DELETE", token=TOKEN)
    assert wrong_method.status == 405 and wrong_method.headers["Allow"] == "GET, HEAD"


def test_openapi_is_open(workerd: Runtime) -> None:
    reply = workerd.request("/v1/openapi.json")
    assert reply.status == 200 and reply.json()["openapi"] == "3.1.0"


def test_a_missing_secret_is_503_never_open(
    start_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    runtime = start_runtime(tmp_path, THREADLINE_API_TOKEN="")
    try:
        runtime.warm()
        for token in (None, "", "anything"):
            reply = runtime.request(THREAD, token=token)
            assert reply.status == 503
            assert reply.json()["type"] == "urn:threadline:problem:auth-unconfigured"
        assert runtime.request("/v1/openapi.json").status == 200
    finally:
        runtime.stop()


def test_a_chunked_body_is_capped_while_it_is_read(workerd: Runtime) -> None:
    """Without a Content-Length the Worker counts the stream and stops at the cap."""

    def chunks(total: int) -> Any:
        sent = 0
        while sent < total:
            piece = min(65_536, total - sent)
            sent += piece
            yield b" " * piece

    small = b'{"agent": "echo", "input": {"text": "chunked"}}'
    ok = workerd.request(THREAD + "/submissions", method="POST", token=TOKEN,
                         body=iter([small]),  # type: ignore[arg-type]
                         headers={"transfer-encoding": "chunked"})
    assert ok.status == 202, ok.body
    big = _oversized_post(workerd, THREAD + "/submissions", lambda: chunks(2 * 1_048_576),
                          headers={"transfer-encoding": "chunked"})
    assert big.status == 413, big.body


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return (ordered[len(ordered) // 2] * 1000,
            ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000)


def test_warm_latency_of_admit_and_summary(workerd: Runtime) -> None:
    """Measured over real HTTP through the Worker and the object; a loose regression guard."""
    import time

    thread = "/v1/spaces/api-latency/threads/t1"
    payload = json.dumps({"agent": "echo", "input": {"text": "hi"}}).encode()
    for _ in range(5):  # warm the object and its imports
        workerd.request(thread + "/submissions", method="POST", token=TOKEN, body=payload)
    admit: list[float] = []
    summary: list[float] = []
    for _ in range(100):
        started = time.perf_counter()
        reply = workerd.request(thread + "/submissions", method="POST", token=TOKEN, body=payload)
        admit.append(time.perf_counter() - started)
        assert reply.status == 202
        started = time.perf_counter()
        reply = workerd.request(thread, token=TOKEN)
        summary.append(time.perf_counter() - started)
        assert reply.status == 200
    admit_p50, admit_p99 = _percentiles(admit)
    summary_p50, summary_p99 = _percentiles(summary)
    print(f"warm latency ms, admit p50 {admit_p50:.1f} p99 {admit_p99:.1f}; "
          f"summary p50 {summary_p50:.1f} p99 {summary_p99:.1f}")
    assert admit_p50 < 1_000 and summary_p50 < 1_000
