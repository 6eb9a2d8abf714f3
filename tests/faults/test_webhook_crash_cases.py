"""A webhook subscriber across losses of the object: wherever the object is lost (before a
delivery, while the receiver holds the request, after the answer but before the cursor is
written, while records are emitted), every record of the log reaches the receiver at least
once, signed, first in log order per Thread, and the subscriber ends at the end of the log."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

import threadline
from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.delivery.outbound import OutboundResponse
from threadline.errors import Evicted
from threadline.maintenance.subscriber_cursors import read_rows
from threadline.testing import SimulatedObject

START = 1_700_000_000_000
SECRET = "whsec_crash"
CONFIG = RuntimeConfig(alarm_backoff_base_ms=1_000, alarm_backoff_cap_ms=60_000)


@dataclass
class Receiver:
    """The destination: keeps every request it got; loses the object on the nth POST, after
    the request arrived and before its answer (``lose_on``), and answers 503 to ``busy``.
    Only requests it answered 2xx count as handled (``handled``)."""

    lose_on: int | None = None
    busy: set[int] = field(default_factory=set)
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    handled: list[int] = field(default_factory=list)

    async def post(self, url: str, *, headers: Mapping[str, str], body: bytes,
                   timeout_ms: int) -> OutboundResponse:
        self.requests.append((dict(headers), body))
        n = len(self.requests)
        if n == self.lose_on:
            raise Evicted("the object is lost while the receiver holds the request")
        if n in self.busy:
            return OutboundResponse(503)
        self.handled.append(n - 1)
        return OutboundResponse(200)


def _app() -> Application:
    app = Application(CONFIG)

    @app.agent("chatty")
    async def chatty(turn: Turn) -> Any:
        for n in range(3):
            await turn.emit({"n": n}, kind="chat")
        return await turn.step("done", lambda: "ok")

    app.webhook("hook", url="https://receiver.example/hook", secret_env="HOOK_SECRET",
                batch=2)
    return app


async def _play(receiver: Receiver, crash: tuple[str, int] | None) -> list[str]:
    obj = SimulatedObject(_app(), clock=ManualClock(START), env={"HOOK_SECRET": SECRET},
                          http=receiver, check_alarm_invariant=True)
    if crash is not None:
        obj.crash_at(*crash)
    async with obj:
        for n, thread in enumerate(("a", "b", "a")):
            obj.admit(thread, "chatty", {"n": n}, f"k{n}")
        await obj.run_alarms(until=START + 600_000, max_passes=300)
        problems: list[str] = []
        logged = {(str(r["thread_id"]), int(r["seq"])): str(r["record_id"])
                  for r in obj.storage.exec("SELECT thread_id, seq, record_id FROM tl_history")}
        end = int(obj.storage.exec("SELECT MAX(pos) AS pos FROM tl_history").one()["pos"])
        got: dict[tuple[str, int], str] = {}
        first_seen: dict[str, list[int]] = {}
        for headers, body in receiver.requests:
            signed = headers["threadline-signature"]
            at = int(signed.split(",")[0].removeprefix("t="))
            try:
                threadline.verify_signature(body, signed, SECRET, now=at)
            except threadline.SignatureInvalid as error:
                problems.append(f"a request does not verify: {error}")
        for index in receiver.handled:
            for record in json.loads(receiver.requests[index][1])["records"]:
                key = (record["thread_id"], record["seq"])
                got[key] = record["record_id"]
                seen = first_seen.setdefault(record["thread_id"], [])
                if record["seq"] not in seen:
                    seen.append(record["seq"])
        if got != logged:
            problems.append(f"records never handled: {sorted(set(logged) - set(got))}")
        for thread, seqs in first_seen.items():
            if seqs != sorted(seqs):
                problems.append(f"{thread} first delivered out of order: {seqs}")
        row = read_rows(obj.storage).get("hook")
        if row is None or row.cursor != end or row.parked:
            problems.append(f"the subscriber ended at {row}, the log at {end}")
        if obj.alarm_at is not None:
            problems.append(f"the alarm is still armed at {obj.alarm_at}")
        if crash is not None and not any(c.fired for c in obj.crashes):
            problems.append(f"the crash at {crash} never fired")
    return problems


CRASHES = [
    ("publication:deliver:before", 1), ("publication:deliver:before", 2),
    ("publication:deliver:after", 1), ("publication:deliver:after", 3),
    ("emit:committed", 2), ("emit:committed", 5), ("settle:after", 1),
]


@pytest.mark.parametrize(("location", "occurrence"), CRASHES)
def test_every_record_reaches_the_webhook_when_the_object_is_lost_at(
    location: str, occurrence: int
) -> None:
    assert asyncio.run(_play(Receiver(busy={2}), (location, occurrence))) == []


@pytest.mark.parametrize("lose_on", [1, 2, 3])
def test_every_record_reaches_the_webhook_when_the_object_is_lost_during_a_request(
    lose_on: int,
) -> None:
    receiver = Receiver(lose_on=lose_on)
    assert asyncio.run(_play(receiver, None)) == []
    # The request cut short is sent again, as the same batch under the same key.
    lost_headers, lost_body = receiver.requests[lose_on - 1]
    again_headers, again_body = receiver.requests[lose_on]
    assert again_body and json.loads(again_body)["records"] == json.loads(lost_body)["records"]
    assert again_headers["idempotency-key"] == lost_headers["idempotency-key"]
