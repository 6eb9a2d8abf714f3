"""Revoking one leaked token, or a subject's earlier tokens, without rotating the signing key."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from api_support import Api
from edge_support import API_TOKEN, KEYS, T1, Worker, problem_of
from sse_support import StreamReader, call, pending, turns

from threadline import access
from threadline.api.http import Request
from threadline.api.revocation_list import KEEP_MS, MAX_REVOCATIONS

REVOCATIONS = "/v1/spaces/acme/revocations"


@pytest.fixture
def worker(api: Api) -> Worker:
    return Worker(api)


def _id_of(worker: Worker, token: str) -> str:
    found = access.verify(token, KEYS, now_ms=worker.api.clock.now_ms()).token_id
    assert found is not None
    return found


def _revoke(worker: Worker, **body: Any) -> dict[str, Any]:
    answer = worker.call("POST", REVOCATIONS, body, token=API_TOKEN)
    assert answer.status == 201, answer.body
    return dict(answer.json())


def _minted(worker: Worker, token: str, **body: Any) -> str:
    body.setdefault("space", "acme")
    answer = worker.call("POST", "/v1/tokens", body, token=token)
    assert answer.status == 201, answer.body
    return str(answer.json()["token"])


def test_a_revoked_token_is_refused_on_its_next_request_and_others_are_not(
    worker: Worker
) -> None:
    leaked, other = worker.mint(), worker.mint()
    assert worker.call("GET", T1, token=leaked).status == 200
    made = _revoke(worker, token_id=_id_of(worker, leaked), reason="posted in a public issue")
    assert made["token_id"] == _id_of(worker, leaked) and made["revoked_by"] is None
    problem = problem_of(worker.call("GET", T1, token=leaked), 401)
    assert problem["detail"] == "the token has been revoked"
    assert worker.call("GET", T1, token=other).status == 200
    assert worker.call("GET", T1, token=API_TOKEN).status == 200


def test_revoking_a_token_revokes_every_token_minted_from_it_even_afterwards(
    worker: Worker
) -> None:
    parent = worker.mint(capabilities=("admin", "read"))
    before = _minted(worker, parent, capabilities=["admin", "read"])
    grandchild = _minted(worker, before)
    _revoke(worker, token_id=_id_of(worker, parent))
    after = _minted(worker, parent)  # the Worker still mints: what it mints is dead
    for token in (parent, before, grandchild, after):
        problem_of(worker.call("GET", T1, token=token), 401)
    _revoke(worker, token_id=_id_of(worker, worker.mint()))  # another family's
    assert worker.call("GET", T1, token=worker.mint()).status == 200


def test_revoking_a_subjects_tokens_refuses_those_issued_before_and_their_children(
    worker: Worker
) -> None:
    alice = worker.mint(capabilities=("admin", "read"), subject="user:alice")
    bob = worker.mint(subject="user:bob")
    worker.api.clock.advance(5_000)
    _revoke(worker, subject="user:alice")
    worker.api.clock.advance(1_000)
    child = _minted(worker, alice, subject="user:alice")  # issued after the cut, from before
    fresh = worker.mint(subject="user:alice")
    for token in (alice, child):
        problem_of(worker.call("GET", T1, token=token), 401)
    assert worker.call("GET", T1, token=fresh).status == 200
    assert worker.call("GET", T1, token=bob).status == 200


def test_a_revocation_survives_a_restart(worker: Worker) -> None:
    leaked = worker.mint()
    _revoke(worker, token_id=_id_of(worker, leaked))
    worker.api.build()  # a new incarnation over the same storage
    problem_of(worker.call("GET", T1, token=leaked), 401)


def test_revocations_are_listed_for_operators_with_who_and_why(api: Api) -> None:
    worker = Worker(api)
    ops = worker.mint(capabilities=("admin",), subject="ops:carol")
    answer = worker.call("POST", REVOCATIONS, {"subject": "user:alice", "reason": "laptop lost"},
                         token=ops)
    assert answer.status == 201, answer.body
    listed = worker.call("GET", REVOCATIONS, token=ops).json()["revocations"]
    assert [(r["subject"], r["revoked_by"], r["reason"]) for r in listed] == [
        ("user:alice", "ops:carol", "laptop lost")]
    assert listed[0]["kept_until"] == listed[0]["issued_before"] + KEEP_MS
    reader = worker.mint(capabilities=("read",))
    problem_of(worker.call("GET", REVOCATIONS, token=reader), 403)
    problem_of(worker.call("POST", REVOCATIONS, {"subject": "x"}, token=reader), 403)


@pytest.mark.parametrize("body", [
    {}, {"token_id": "abc", "subject": "user:a"}, {"token_id": "abc", "issued_before": 5},
    {"token_id": "not an id"}, {"subject": " padded "}, {"subject": "user:a", "issued_before": 0},
    {"subject": "user:a", "issued_before": "yesterday"},
])
def test_a_bad_revocation_is_refused_and_writes_nothing(worker: Worker, body: Any) -> None:
    problem_of(worker.call("POST", REVOCATIONS, body, token=API_TOKEN), 422)
    assert worker.api.dump().get("tl_revocations", []) == []


def test_a_revocation_is_dropped_once_every_token_it_refuses_has_expired(worker: Worker) -> None:
    leaked = worker.mint(ttl=timedelta(days=7))
    _revoke(worker, token_id=_id_of(worker, leaked))
    worker.api.clock.advance(KEEP_MS - 1)
    assert len(worker.call("GET", REVOCATIONS, token=API_TOKEN).json()["revocations"]) == 1
    worker.api.clock.advance(1)
    assert worker.call("GET", REVOCATIONS, token=API_TOKEN).json()["revocations"] == []
    _revoke(worker, subject="user:x")  # the next write drops the expired row
    assert len(worker.api.dump()["tl_revocations"]) == 1


def test_a_space_holds_a_bounded_number_of_revocations(worker: Worker) -> None:
    rows = [(f"t{n}", worker.api.clock.now_ms()) for n in range(MAX_REVOCATIONS)]
    worker.api.storage.transaction(lambda: [worker.api.storage.exec(
        "INSERT INTO tl_revocations (token_id, revoked_at) VALUES (?, ?)", *row) for row in rows])
    worker.api.build()
    problem = problem_of(worker.call("POST", REVOCATIONS, {"token_id": "one-more"},
                                     token=API_TOKEN), 409)
    assert "rotate the signing key" in problem["detail"]


def test_a_check_reads_no_storage_once_the_revocations_are_loaded(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    _revoke(worker, token_id=_id_of(worker, worker.mint()))
    worker.api.build()
    token = worker.mint()
    storage = worker.api.storage
    statements: list[str] = []
    real = storage.exec

    def counted(sql: str, *args: Any) -> Any:
        statements.append(sql)
        return real(sql, *args)

    monkeypatch.setattr(storage, "exec", counted)
    for _ in range(3):
        assert worker.call("GET", T1, token=token).status == 200
    reads = [s for s in statements if "tl_revocations" in s]
    assert len(reads) == 1  # the incarnation's one load; the next requests check from memory


def test_an_open_stream_of_a_revoked_token_ends_at_its_next_heartbeat(worker: Worker) -> None:
    api = worker.api
    leaked = worker.mint()
    interval = api.app.config.sse_heartbeat_ms

    async def go() -> None:
        outcome = await worker.edge.admit("GET", "https://t.test" + T1 + "/events",
                                          {"authorization": f"Bearer {leaked}"})
        assert not hasattr(outcome, "status"), outcome
        request = Request.from_url("GET", outcome.url, outcome.headers, b"")  # type: ignore
        reply = await api.space.handle(request)
        assert reply.status == 200
        reader = StreamReader(reply)
        waiting = await pending(reader)
        api.clock.advance(interval)
        await turns()
        assert (await waiting).comment == "keep-alive"
        revoked = await call(api, "POST", REVOCATIONS, {"token_id": _id_of(worker, leaked)})
        assert revoked.status == 201, revoked.body
        waiting = await pending(reader)
        api.clock.advance(interval)
        await turns()
        with pytest.raises(StopAsyncIteration):
            await waiting

    asyncio.run(go())


def test_a_lineage_is_bounded(worker: Worker) -> None:
    token = worker.mint(capabilities=("admin", "read"))
    for _ in range(access.MAX_LINEAGE - 1):
        token = _minted(worker, token, capabilities=["admin", "read"])
    problem = problem_of(worker.call("POST", "/v1/tokens", {"space": "acme"}, token=token), 403)
    assert "mints no more" in problem["detail"]


def test_revocations_and_who_made_them_are_read_back_after_a_restart(api: Api) -> None:
    worker = Worker(api)
    first, second = worker.mint(), worker.mint()
    ops = worker.mint(capabilities=("admin",), subject="ops:carol")
    for token, reason in ((first, "one"), (second, "two")):
        answer = worker.call("POST", REVOCATIONS, {"token_id": _id_of(worker, token),
                                                    "reason": reason}, token=ops)
        assert answer.status == 201, answer.body
    worker.api.build()  # what is listed and refused now is what storage kept
    for token in (first, second):
        problem_of(worker.call("GET", T1, token=token), 401)
    listed = worker.call("GET", REVOCATIONS, token=ops).json()["revocations"]
    assert [(r["revoked_by"], r["reason"]) for r in listed] == [
        ("ops:carol", "one"), ("ops:carol", "two")]


def test_a_later_revocation_with_an_earlier_cut_does_not_narrow_the_first(
    worker: Worker
) -> None:
    worker.api.clock.advance(10_000)
    early = worker.mint(subject="user:alice")
    worker.api.clock.advance(10_000)
    _revoke(worker, subject="user:alice")  # everything of hers issued until now
    _revoke(worker, subject="user:alice", issued_before=worker.api.clock.now_ms() - 15_000)
    problem_of(worker.call("GET", T1, token=early), 401)


def test_a_subject_revocation_may_reach_back_to_just_inside_the_token_lifetime(
    worker: Worker
) -> None:
    now = worker.api.clock.now_ms()
    worker.api.clock.advance(KEEP_MS)
    now = worker.api.clock.now_ms()
    problem_of(worker.call("POST", REVOCATIONS, {"subject": "user:a",
                                                 "issued_before": now - KEEP_MS},
                           token=API_TOKEN), 422)
    _revoke(worker, subject="user:a", issued_before=now - KEEP_MS + 1)
