"""app.queue: each record of a batch sent as one Queue message through the producer binding."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from destination_support import FakeQueue, context, records

import threadline
from threadline.delivery.outbound import QueueProducer
from threadline.delivery.queues import MAX_SEND_BYTES
from threadline.delivery.subscribers import SubscriberSpec
from threadline.errors import DeliveryRefused, SchedulingError
from threadline.threads.records import Record


def _spec(**options: Any) -> SubscriberSpec:
    return threadline.Application().queue("audit", **options)


def _deliver(spec: SubscriberSpec, batch: list[Record], env: Any) -> None:
    asyncio.run(spec.deliver(batch, context(env, subscriber=spec.name)))


def test_a_batch_is_sent_in_one_call_one_message_per_record() -> None:
    queue = FakeQueue()
    batch = records(3)
    _deliver(_spec(), batch, {"EVENTS": queue})
    assert queue.calls == [[
        {"space": "acme", "subscriber": "audit", "record": record.to_json()} for record in batch]]


def test_the_binding_is_looked_up_by_its_declared_name_in_the_environment() -> None:
    queue = FakeQueue()
    _deliver(_spec(binding="AUDIT_QUEUE"), records(2), SimpleNamespace(AUDIT_QUEUE=queue))
    assert len(queue.calls[0]) == 2


def test_an_environment_that_adapts_its_queues_is_asked_for_the_producer() -> None:
    queue = FakeQueue()

    class Adapting:
        def queue_producer(self, binding: str) -> QueueProducer | None:
            return queue if binding == "EVENTS" else None

    _deliver(_spec(), records(1), Adapting())
    assert len(queue.calls) == 1
    with pytest.raises(DeliveryRefused, match="OTHER"):
        _deliver(_spec(binding="OTHER"), records(1), Adapting())


@pytest.mark.parametrize("env", [{}, None, {"EVENTS": "not a queue"}, SimpleNamespace()])
def test_a_missing_binding_parks_naming_it(env: Any) -> None:
    with pytest.raises(DeliveryRefused, match="no Queue producer bound as EVENTS") as caught:
        _deliver(_spec(), records(1), env)
    assert caught.value.detail == "missing Queue binding EVENTS"


def test_a_failed_send_is_retried_not_parked() -> None:
    queue = FakeQueue(fail=RuntimeError("Queue send failed: 10201"))
    with pytest.raises(RuntimeError) as caught:
        _deliver(_spec(), records(1), {"EVENTS": queue})
    assert not isinstance(caught.value, DeliveryRefused)


def test_a_batch_over_the_send_limit_is_split_in_order() -> None:
    queue = FakeQueue()
    batch = records(40, body={"text": "x" * 20_000})
    _deliver(_spec(), batch, {"EVENTS": queue})
    assert len(queue.calls) > 1
    for call in queue.calls:
        assert len(json.dumps(call).encode()) <= MAX_SEND_BYTES
    sent = [body["record"]["record_id"] for call in queue.calls for body in call]
    assert sent == [record.record_id for record in batch]


def test_a_record_over_the_message_limit_parks_naming_it_and_sends_nothing() -> None:
    queue = FakeQueue()
    batch = records(1) + records(1, start=2, body={"text": "x" * 130_000})
    with pytest.raises(DeliveryRefused, match="r-t1-2 is over the Queue's 128 KB") as caught:
        _deliver(_spec(), batch, {"EVENTS": queue})
    assert caught.value.detail is not None and "seq 2" in caught.value.detail
    assert queue.calls == []


def test_app_queue_registers_a_subscriber_with_the_given_options() -> None:
    app = threadline.Application()
    spec = app.queue("audit", binding="AUDIT", kinds={"approval.requested"}, start="now",
                     version=2, required=True, batch=50, dispatch_timeout=timedelta(seconds=3))
    assert app.subscribers.get("audit") is spec
    assert (spec.kinds, spec.start, spec.version, spec.required, spec.batch) == (
        frozenset({"approval.requested"}), "now", 2, True, 50)
    assert spec.deliver.binding == "AUDIT"  # type: ignore[attr-defined]
    assert app.queue("defaults").batch == 100


def test_a_queue_batch_over_100_is_refused_at_declaration() -> None:
    with pytest.raises(SchedulingError, match="at most 100"):
        _spec(batch=101)


@pytest.mark.parametrize("binding", ["", "has-dash", "1X", None, 5])
def test_a_bad_binding_name_is_refused_at_declaration(binding: Any) -> None:
    with pytest.raises(SchedulingError, match="binding"):
        _spec(binding=binding)
