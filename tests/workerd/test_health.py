"""The example app (src/entry.py, unchanged) answers through the Worker and its object."""

from __future__ import annotations

from workerd_runtime import TOKEN, Runtime


def test_health_through_the_worker_and_the_object(workerd: Runtime) -> None:
    reply = workerd.request("/v1/health")
    assert reply.status == 200
    body = reply.json()
    assert body["status"] == "ok"
    # The object ran its migrations in its constructor before answering.
    assert body["schema_version"] >= 1


def test_unknown_route_is_a_problem_from_the_object(workerd: Runtime) -> None:
    reply = workerd.request("/v1/spaces/s1/no-such-route", token=TOKEN)
    assert reply.status == 404
    assert reply.headers["Content-Type"].startswith("application/problem+json")
    assert reply.json()["status"] == 404


def test_the_worker_refuses_a_missing_token(workerd: Runtime) -> None:
    reply = workerd.request("/v1/spaces/s1/threads/t1")
    assert reply.status == 401
