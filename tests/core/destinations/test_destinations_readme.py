"""The "Webhooks and queues" examples of README.md run as written: the declarations register
both subscribers, and both receiver checks accept what a webhook sends and refuse a forgery."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

from destination_support import FakeHttp, FakeQueue, context, records

from threadline.delivery.webhooks import signature_header

README = Path(__file__).resolve().parents[3] / "README.md"
SECRET = "whsec_readme"


def _examples() -> tuple[dict[str, Any], dict[str, Any]]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Webhooks and queues\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 2, "the section shows the declarations and the receiver"
    spaces: list[dict[str, Any]] = []
    for n, block in enumerate(blocks):
        namespace: dict[str, Any] = {"__name__": f"readme_destinations_{n}"}
        exec(compile(block, str(README), "exec"), namespace)
        spaces.append(namespace)
    return spaces[0], spaces[1]


def _sent_by_the_webhook(declared: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    crm = declared["app"].subscribers.get("crm")
    http = FakeHttp()
    now_ms = time.time_ns() // 1_000_000  # the receiver checks against its own clock
    asyncio.run(crm.deliver(records(2), context({"CRM_WEBHOOK_SECRET": SECRET}, http,
                                                now_ms=now_ms)))
    [sent] = http.sent
    return sent.body, sent.headers


def test_the_readme_declarations_register_a_webhook_and_a_queue() -> None:
    declared, _ = _examples()
    app = declared["app"]
    crm, audit = app.subscribers.get("crm"), app.subscribers.get("audit")
    assert crm.kinds == frozenset({"submission.settled", "approval.requested"})
    assert crm.deliver.url == "https://crm.example.com/hooks/threadline"
    queue = FakeQueue()
    asyncio.run(audit.deliver(records(2), context({"EVENTS": queue}, subscriber="audit")))
    assert [body["record"]["seq"] for body in queue.calls[0]] == [1, 2]


def test_the_readme_receiver_accepts_a_webhook_and_refuses_a_forgery() -> None:
    declared, receiver = _examples()
    body, headers = _sent_by_the_webhook(declared)
    receive = receiver["receive"]
    assert receive(body, headers, SECRET) == 200
    assert receive(body.replace(b'"seq":1', b'"seq":9'), headers, SECRET) == 401
    assert receive(body, headers, "another secret") == 401
    assert receive(body, {}, SECRET) == 401
    stale = signature_header(body, [SECRET], int(time.time()) - 301)
    assert receive(body, {"threadline-signature": stale}, SECRET) == 401


def test_the_readme_check_without_threadline_agrees() -> None:
    declared, receiver = _examples()
    verify = receiver["verify_without_threadline"]
    body, headers = _sent_by_the_webhook(declared)
    header = headers["threadline-signature"]
    assert verify(body, header, SECRET)
    assert not verify(body + b" ", header, SECRET)
    assert not verify(body, header, "another secret")
    now = int(time.time())
    assert verify(body, signature_header(body, ["old", SECRET], now), SECRET)
    assert not verify(body, signature_header(body, [SECRET], now - 301), SECRET)
    for malformed in ("", "t=,v1=", f"v1=x,t={now},t={now}", "garbage", f"t={now},v1=é"):
        assert not verify(body, malformed, SECRET)
