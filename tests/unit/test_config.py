import pytest
from pydantic import ValidationError

from threadline.config import RuntimeConfig


def test_defaults_match_the_design() -> None:
    config = RuntimeConfig()
    assert config.alarm_backoff_base_ms == 1_000
    assert config.alarm_backoff_cap_ms == 300_000
    assert config.park_after_stalls == 12
    assert config.lease_ms == 60_000
    assert config.native_concurrency == 64
    assert config.after_native_concurrency == 2
    assert config.yield_after_ms == 600_000
    assert config.event_deadline_ms == 840_000
    assert config.projection_dispatch_timeout_ms == 30_000
    assert config.max_attempts == 5
    assert config.max_consecutive_losses == 20
    assert config.max_body_bytes == 1_048_576
    assert config.min_alarm_delay_ms == 500


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("alarm_backoff_base_ms", 0),
        ("park_after_stalls", 31),
        ("lease_ms", 10),
        ("native_concurrency", 0),
        ("event_deadline_ms", 900_000),
        ("projection_dispatch_timeout_ms", 300_001),
        ("max_attempts", 0),
        ("max_consecutive_losses", 0),
        ("max_consecutive_losses", 1_001),
        ("max_body_bytes", 10),
        ("lease_ms", "soon"),
    ],
)
def test_each_bad_field_is_named(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        RuntimeConfig(**{field: value})
    assert [error["loc"] for error in info.value.errors()] == [(field,)]


def test_relations_between_fields_are_checked() -> None:
    with pytest.raises(ValidationError, match="alarm_backoff_cap_ms must be >="):
        RuntimeConfig(alarm_backoff_base_ms=5_000, alarm_backoff_cap_ms=4_000)
    with pytest.raises(ValidationError, match="yield_after_ms must be <="):
        RuntimeConfig(yield_after_ms=800_000, event_deadline_ms=700_000)


def test_unknown_fields_are_refused_and_config_is_frozen() -> None:
    with pytest.raises(ValidationError, match="lease_seconds"):
        RuntimeConfig(lease_seconds=3)  # type: ignore[call-arg]
    config = RuntimeConfig()
    with pytest.raises(ValidationError):
        config.lease_ms = 5  # type: ignore[misc]


def test_min_alarm_delay_rounds_up_and_is_at_least_one() -> None:
    assert RuntimeConfig(alarm_backoff_base_ms=1).min_alarm_delay_ms == 1
    assert RuntimeConfig(alarm_backoff_base_ms=3).min_alarm_delay_ms == 2


def test_the_stream_heartbeat_is_bounded() -> None:
    assert RuntimeConfig().sse_heartbeat_ms == 15_000
    assert RuntimeConfig(sse_heartbeat_ms=1_000).sse_heartbeat_ms == 1_000
    for value in (999, 300_001, 0):
        with pytest.raises(ValidationError) as raised:
            RuntimeConfig(sse_heartbeat_ms=value)
        assert "sse_heartbeat_ms" in str(raised.value)
