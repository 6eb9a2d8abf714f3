"""The README's "Limits" table states the limits the code enforces."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from threadline.config import RuntimeConfig
from threadline.delivery.subscribers import DEFAULT_BATCH_BYTES
from threadline.maintenance.lanes import MAX_DISPATCH_TIMEOUT_MS, MIN_DISPATCH_TIMEOUT_MS
from threadline.threads.agents import MAX_AGENT_CONCURRENCY, MAX_RATE_LIMIT
from threadline.threads.decisions import MAX_ABORT_REASON_CHARS
from threadline.threads.failed_attempts import FAILURES_KEPT
from threadline.threads.model import ID_PATTERN, MAX_ERROR_MESSAGE_CHARS
from threadline.threads.turn import KIND_PATTERN, MAX_SLEEP_SECONDS
from threadline.threads.turn_base import INLINE_WAIT_MS, RetryPolicy
from threadline.threads.turn_http import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S

README = Path(__file__).resolve().parents[2] / "README.md"
_ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \|", re.MULTILINE)


def limits_table() -> dict[str, str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Limits\n")
    end = text.index("\n## ", start + 1)
    return dict(_ROW.findall(text[start:end]))


def expected() -> dict[str, str]:
    defaults = RuntimeConfig()
    fields = ("max_value_bytes", "max_body_bytes", "max_json_depth", "attempt_timeout_ms",
              "cancel_grace_ms", "max_attempts", "max_consecutive_losses", "lease_ms",
              "max_message_hops", "native_concurrency", "after_native_concurrency",
              "max_event_streams", "max_event_streams_per_subject")
    documented = {name: str(getattr(defaults, name)) for name in fields}
    documented.update({
        "MAX_SLEEP_SECONDS": str(MAX_SLEEP_SECONDS),
        "MIN_DISPATCH_TIMEOUT_MS": str(MIN_DISPATCH_TIMEOUT_MS),
        "MAX_DISPATCH_TIMEOUT_MS": str(MAX_DISPATCH_TIMEOUT_MS),
        "MAX_ABORT_REASON_CHARS": str(MAX_ABORT_REASON_CHARS),
        "KIND_PATTERN": KIND_PATTERN,
        "ID_PATTERN": ID_PATTERN,
        "MAX_ERROR_MESSAGE_CHARS": str(MAX_ERROR_MESSAGE_CHARS),
        "FAILURES_KEPT": str(FAILURES_KEPT),
        "DEFAULT_BATCH_BYTES": str(DEFAULT_BATCH_BYTES),
        "DEFAULT_MAX_BYTES": str(DEFAULT_MAX_BYTES),
        "DEFAULT_TIMEOUT_S": f"{DEFAULT_TIMEOUT_S:g}",
        "INLINE_WAIT_MS": str(INLINE_WAIT_MS),
        "MAX_AGENT_CONCURRENCY": str(MAX_AGENT_CONCURRENCY),
        "MAX_RATE_LIMIT": str(MAX_RATE_LIMIT),
        "RetryPolicy.max_waits": str(RetryPolicy().max_waits),
        "RetryPolicy.max_wait_ms": str(RetryPolicy().max_wait_ms),
    })
    return documented


def test_the_readme_lists_every_limit_with_the_value_the_code_uses() -> None:
    assert limits_table() == expected()


@pytest.mark.parametrize(
    ("name", "bound"),
    [("max_json_depth", 256), ("cancel_grace_ms", 60_000), ("after_native_concurrency", 16),
     ("native_concurrency", 256)],
)
def test_the_upper_bounds_the_readme_states_are_the_config_bounds(name: str, bound: int) -> None:
    # A shorter event deadline, so the longest grace still fits the platform's limit.
    base = {"event_deadline_ms": 800_000, "yield_after_ms": 600_000}
    RuntimeConfig(**base, **{name: bound})
    with pytest.raises(ValueError):
        RuntimeConfig(**base, **{name: bound + 1})


def test_the_event_deadline_the_readme_names_is_the_default() -> None:
    text = README.read_text(encoding="utf-8")
    assert f"`event_deadline_ms` (`{RuntimeConfig().event_deadline_ms}`)" in text
