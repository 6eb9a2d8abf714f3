"""app.webhook: one signed POST per batch, and what each answer does to the batch."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from destination_support import NOW_MS, FakeHttp, Sent, context, records

import threadline
from threadline.delivery.outbound import OutboundResponse, OutboundTimeout
from threadline.delivery.subscribers import SubscriberSpec
from threadline.delivery.webhooks import DETAIL_BODY_BYTES, WebhookUnavailable
from threadline.errors import DeliveryRefused, SchedulingError
from threadline.threads.records import Record

URL = "https://crm.example.com/hooks/threadline?token=s3cr3t-path"
SECRET = "whsec_value_never_shown"
ENV = {"CRM_SECRET": SECRET}


def _spec(**options: Any) -> SubscriberSpec:
    app = threadline.Application()
    options.setdefault("url", URL)
    options.setdefault("secret_env", "CRM_SECRET")
    return app.webhook("crm", **options)


def _deliver(spec: SubscriberSpec, batch: list[Record], http: FakeHttp,
             env: Any = None, **ctx: Any) -> None:
    asyncio.run(spec.deliver(batch, context(ENV if env is None else env, http, **ctx)))


def test_a_2xx_delivers_the_batch_as_signed_json() -> None:
    http = FakeHttp(OutboundResponse(204))
    batch = records(3)
    _deliver(_spec(), batch, http)
    [sent] = http.sent
    assert sent.url == URL
    assert json.loads(sent.body) == {
        "space": "acme", "subscriber": "crm", "records": [r.to_json() for r in batch]}
    assert sent.headers["content-type"] == "application/json"
    signed_at = threadline.verify_signature(
        sent.body, sent.headers["threadline-signature"], SECRET, now=NOW_MS / 1000)
    assert signed_at == NOW_MS // 1000


@pytest.mark.parametrize("status", [200, 201, 202, 299])
def test_every_2xx_delivers(status: int) -> None:
    _deliver(_spec(), records(1), FakeHttp(OutboundResponse(status)))


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 599])
def test_408_429_and_5xx_are_retried_not_parked(status: int) -> None:
    http = FakeHttp(OutboundResponse(status, body=b"busy"))
    with pytest.raises(WebhookUnavailable) as caught:
        _deliver(_spec(), records(1), http)
    assert not isinstance(caught.value, DeliveryRefused)
    assert caught.value.status == status
    assert f"HTTP {status}: busy" in str(caught.value)


def test_a_timeout_is_retried() -> None:
    with pytest.raises(WebhookUnavailable, match="did not answer within"):
        _deliver(_spec(), records(1), FakeHttp(OutboundTimeout("slow")))


def test_an_unreachable_host_is_retried() -> None:
    with pytest.raises(WebhookUnavailable, match=r"could not be reached \(ConnectionRefusedError"):
        _deliver(_spec(), records(1), FakeHttp(ConnectionRefusedError("refused")))


def test_a_404_parks_the_subscriber_with_the_status_and_body_as_detail() -> None:
    http = FakeHttp(OutboundResponse(404, body=b'{"error":"no such hook"}'))
    with pytest.raises(DeliveryRefused) as caught:
        _deliver(_spec(), records(1), http)
    assert caught.value.detail == 'HTTP 404: {"error":"no such hook"}'
    assert "HTTP 404" in str(caught.value)


@pytest.mark.parametrize("status", [400, 401, 403, 410, 422, 301, 302, 307])
def test_other_4xx_and_redirects_park(status: int) -> None:
    with pytest.raises(DeliveryRefused) as caught:
        _deliver(_spec(), records(1), FakeHttp(OutboundResponse(status)))
    assert caught.value.detail == f"HTTP {status}"


def test_a_refusal_keeps_only_the_start_of_the_answer() -> None:
    body = "é" * DETAIL_BODY_BYTES  # two bytes each: the cut falls inside a character
    with pytest.raises(DeliveryRefused) as caught:
        _deliver(_spec(), records(1), FakeHttp(OutboundResponse(400, body=body.encode())))
    detail = caught.value.detail
    assert detail is not None and detail.startswith("HTTP 400: éé")
    assert len(detail.encode()) <= DETAIL_BODY_BYTES + len("HTTP 400: ")


def test_errors_name_the_host_only_never_the_path_query_or_secret() -> None:
    answers: list[Any] = [OutboundResponse(404, body=b"gone"), OutboundResponse(503),
                          OutboundTimeout("slow"), OSError("reset")]
    for answer in answers:
        with pytest.raises(Exception) as caught:
            _deliver(_spec(), records(1), FakeHttp(answer))
        text = f"{caught.value} {getattr(caught.value, 'detail', '')}"
        assert "https://crm.example.com" in text
        assert "s3cr3t-path" not in text and SECRET not in text


def test_a_missing_secret_parks_naming_the_variable_without_sending() -> None:
    http = FakeHttp()
    for env in ({}, {"CRM_SECRET": ""}, None, SimpleNamespace()):
        with pytest.raises(DeliveryRefused, match="the secret CRM_SECRET is not set"):
            asyncio.run(_spec().deliver(records(1), context(env, http)))
    assert http.sent == []


def test_the_secret_is_read_from_the_environment_at_each_delivery() -> None:
    spec, http = _spec(), FakeHttp()
    _deliver(spec, records(1), http, env={"CRM_SECRET": "first"})
    _deliver(spec, records(1), http, env=SimpleNamespace(CRM_SECRET="second"))
    first, second = http.sent
    threadline.verify_signature(first.body, first.headers["threadline-signature"], "first",
                                now=NOW_MS / 1000)
    threadline.verify_signature(second.body, second.headers["threadline-signature"], "second",
                                now=NOW_MS / 1000)


def test_secrets_being_rotated_each_sign_and_only_the_first_is_required() -> None:
    spec, http = _spec(secret_env=["NEW_SECRET", "OLD_SECRET"]), FakeHttp()
    _deliver(spec, records(1), http, env={"NEW_SECRET": "new", "OLD_SECRET": "old"})
    _deliver(spec, records(1), http, env={"NEW_SECRET": "new"})
    both, one = (sent.headers["threadline-signature"] for sent in http.sent)
    assert both.count("v1=") == 2 and one.count("v1=") == 1
    for secret in ("new", "old"):
        threadline.verify_signature(http.sent[0].body, both, secret, now=NOW_MS / 1000)
    with pytest.raises(DeliveryRefused, match="NEW_SECRET"):
        _deliver(spec, records(1), http, env={"OLD_SECRET": "old"})


def _key(sent: Sent) -> str:
    return sent.headers["idempotency-key"]


def test_the_idempotency_key_is_the_same_for_a_redelivery_of_the_same_batch() -> None:
    spec, http = _spec(), FakeHttp()
    _deliver(spec, records(3), http)
    _deliver(spec, records(3), http, now_ms=NOW_MS + 60_000)  # a retry a minute later
    first, again = http.sent
    assert _key(first) == _key(again)
    assert len(_key(first)) == 64 and int(_key(first), 16) >= 0
    assert first.headers["threadline-signature"] != again.headers["threadline-signature"]


def test_the_idempotency_key_depends_on_the_records_not_on_the_space_name() -> None:
    # An object started by its alarm may not know its name; a redelivery of the same records
    # must still carry the same key.
    spec, http = _spec(), FakeHttp()
    _deliver(spec, records(3), http)
    _deliver(spec, records(3), http, space="")
    first, again = http.sent
    assert _key(first) == _key(again)


def test_the_idempotency_key_names_the_records_the_subscriber_and_its_version() -> None:
    http = FakeHttp()
    _deliver(_spec(), records(3), http)
    _deliver(_spec(), records(4), http)                   # one more record
    _deliver(_spec(), records(3, start=2), http)          # other records
    _deliver(_spec(), records(3, thread="t2"), http)      # another Thread
    _deliver(_spec(version=2), records(3), http)          # a backfill asked for
    _deliver(_spec(), records(3), http, subscriber="erp")  # another subscriber
    keys = [_key(sent) for sent in http.sent]
    assert len(set(keys)) == len(keys)


def test_the_http_allowance_is_a_little_short_of_the_dispatch_timeout() -> None:
    for dispatch, expected in ((timedelta(seconds=30), 29_000), (timedelta(seconds=2), 1_800),
                               (timedelta(milliseconds=5), 5)):
        http = FakeHttp()
        _deliver(_spec(dispatch_timeout=dispatch), records(1), http)
        assert http.sent[0].timeout_ms == expected


def test_app_webhook_registers_a_subscriber_with_the_given_options() -> None:
    app = threadline.Application()
    spec = app.webhook("crm", url=URL, secret_env="CRM_SECRET", kinds=["submission.settled"],
                       start="now", version=3, required=True, batch=10,
                       dispatch_timeout=timedelta(seconds=5))
    assert app.subscribers.get("crm") is spec
    assert (spec.kinds, spec.start, spec.version, spec.required, spec.batch) == (
        frozenset({"submission.settled"}), "now", 3, True, 10)
    assert spec.dispatch_timeout == timedelta(seconds=5)
    with pytest.raises(SchedulingError, match="not the string"):
        app.webhook("one-kind", url=URL, secret_env="S", kinds="approval.requested")
    assert app.webhook("all", url=URL, secret_env="S").kinds is None
    with pytest.raises(SchedulingError, match="already declared"):
        app.webhook("crm", url=URL, secret_env="CRM_SECRET")


@pytest.mark.parametrize("url", [
    "https://example.com/hook", "https://example.com:8443/h", "http://127.0.0.1:8080/hook",
    "http://localhost/hook", "http://[::1]:9000/",
])
def test_https_or_local_http_urls_are_accepted(url: str) -> None:
    assert _spec(url=url).deliver.url == url  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", [
    "http://example.com/hook", "http://10.0.0.1/hook", "ftp://example.com/",
    "https:///nohost", "example.com/hook", "", "https://user:pw@example.com/",
    "https://example.com:99999/", None, 42,
])
def test_other_urls_are_refused_at_declaration(url: Any) -> None:
    with pytest.raises(SchedulingError, match="url"):
        _spec(url=url)


@pytest.mark.parametrize("secret_env", ["", "has space", "1STARTS_WITH_DIGIT", [], None, ["OK", 3]])
def test_a_bad_secret_name_is_refused_at_declaration(secret_env: Any) -> None:
    with pytest.raises(SchedulingError, match="secret_env"):
        _spec(secret_env=secret_env)


def test_bad_subscriber_options_are_refused_at_declaration() -> None:
    with pytest.raises(SchedulingError):
        _spec(batch=0)
    with pytest.raises(SchedulingError):
        _spec(dispatch_timeout=timedelta(minutes=10))
    with pytest.raises(SchedulingError):
        _spec(kinds=[])


def test_the_request_says_it_comes_from_threadline() -> None:
    http = FakeHttp()
    _deliver(_spec(), records(1), http)
    assert http.sent[0].headers["user-agent"] == "threadline-webhook"


def test_non_ascii_text_is_sent_as_utf8_not_escaped() -> None:
    http = FakeHttp()
    _deliver(_spec(), records(1, body={"text": "héllo ✓"}), http)
    assert "héllo ✓".encode() in http.sent[0].body
    assert b"\\u" not in http.sent[0].body


def test_the_idempotency_key_is_a_sha256_of_subscriber_version_and_record_ids() -> None:
    # Receivers keep keys across our deploys: the derivation must not drift between releases.
    http = FakeHttp()
    batch = records(2)
    _deliver(_spec(version=3), batch, http)
    expected = hashlib.sha256(
        b"threadline-webhook\x00crm\x003\x00"
        + b"".join(record.record_id.encode() + b"\n" for record in batch)).hexdigest()
    assert _key(http.sent[0]) == expected


def test_a_300_parks_rather_than_delivers() -> None:
    with pytest.raises(DeliveryRefused) as caught:
        _deliver(_spec(), records(1), FakeHttp(OutboundResponse(300)))
    assert caught.value.detail == "HTTP 300"


def test_a_status_of_600_or_more_parks_rather_than_retries() -> None:
    with pytest.raises(DeliveryRefused) as caught:
        _deliver(_spec(), records(1), FakeHttp(OutboundResponse(600, body=b"odd")))
    assert caught.value.detail == "HTTP 600: odd"


def test_an_answer_cut_inside_a_character_or_not_utf8_still_parks_with_a_detail() -> None:
    for body in (b"a" + "é".encode() * DETAIL_BODY_BYTES, b"\xff\xfe not utf-8"):
        with pytest.raises(DeliveryRefused) as caught:
            _deliver(_spec(), records(1), FakeHttp(OutboundResponse(400, body=body)))
        detail = caught.value.detail
        assert detail is not None and detail.startswith("HTTP 400: ")
        assert "\ufffd" in detail


def test_a_missing_secret_is_named_in_the_parked_detail() -> None:
    with pytest.raises(DeliveryRefused) as caught:
        _deliver(_spec(), records(1), FakeHttp(), env={})
    assert caught.value.detail == "missing secret CRM_SECRET"
    assert "Worker's environment" in str(caught.value)


def test_an_empty_or_non_text_rotated_secret_is_not_used_to_sign() -> None:
    spec = _spec(secret_env=["NEW_SECRET", "OLD_SECRET", "OLDER_SECRET"])
    http = FakeHttp()
    _deliver(spec, records(1), http, env={"NEW_SECRET": "new", "OLD_SECRET": "",
                                          "OLDER_SECRET": 7})
    assert http.sent[0].headers["threadline-signature"].count("v1=") == 1


def test_errors_name_the_webhook() -> None:
    with pytest.raises(WebhookUnavailable, match="webhook 'crm'"):
        _deliver(_spec(), records(1), FakeHttp(OutboundResponse(503)))


def test_a_url_with_a_user_but_no_password_is_refused_at_declaration() -> None:
    with pytest.raises(SchedulingError, match="url"):
        _spec(url="https://user@example.com/hook")


@pytest.mark.parametrize("kinds", [[""], [3], ["submission.settled", None]])
def test_kinds_holding_an_empty_or_non_text_kind_are_refused_at_declaration(kinds: Any) -> None:
    with pytest.raises(SchedulingError, match="kinds"):
        _spec(kinds=kinds)


def test_a_one_millisecond_dispatch_timeout_gives_a_one_millisecond_http_allowance() -> None:
    http = FakeHttp()
    _deliver(_spec(dispatch_timeout=timedelta(milliseconds=1)), records(1), http)
    assert http.sent[0].timeout_ms == 1
