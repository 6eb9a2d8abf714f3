"""The default idempotency key of a fire: stable, distinct per fire, within the key limits."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadline.api.models import ID_REGEX
from threadline.errors import SchedulingError
from threadline.schedules import MAX_FIRE_ORDINAL, fire_key
from threadline.threads.model import check_id

ids = st.from_regex(r"[a-z0-9][a-z0-9._:-]{0,63}", fullmatch=True).filter(
    lambda s: not s.startswith("threadline:")
)
fire_times = st.integers(0, 253_402_300_799_999)
ordinals = st.integers(0, MAX_FIRE_ORDINAL)


def test_the_key_names_the_schedule_and_the_fire_time() -> None:
    assert fire_key("digest", 1_774_854_000_000) == "schedule:digest:2026-03-30T07:00:00.000Z"
    assert fire_key("digest", 1_774_854_000_123, 2) == "schedule:digest:2026-03-30T07:00:00.123Z:2"


def test_the_key_is_stable_across_calls_and_processes() -> None:
    assert fire_key("billing-sync", 1_700_000_000_000) == fire_key("billing-sync",
                                                                   1_700_000_000_000)
    assert fire_key("billing-sync", 1_700_000_000_000) == (
        "schedule:billing-sync:2023-11-14T22:13:20.000Z"
    )


@given(ids, fire_times, ordinals)
def test_every_key_is_a_valid_submission_key(schedule_id: str, fire: int, ordinal: int) -> None:
    key = fire_key(schedule_id, fire, ordinal)
    assert re.fullmatch(ID_REGEX, key)
    assert check_id(key, field="idempotency_key") == key
    assert len(key) <= 108


@given(ids, fire_times, ordinals, ids, fire_times, ordinals)
def test_keys_of_different_fires_differ(a_id: str, a_fire: int, a_ord: int,
                                        b_id: str, b_fire: int, b_ord: int) -> None:
    if (a_id, a_fire, a_ord) != (b_id, b_fire, b_ord):
        assert fire_key(a_id, a_fire, a_ord) != fire_key(b_id, b_fire, b_ord)


def test_ids_with_colons_and_times_cannot_collide() -> None:
    keys = {
        fire_key("a", 0, 1),
        fire_key("a:1970-01-01", 0),
        fire_key("a", 1),
        fire_key("a:1", 0),
    }
    assert len(keys) == 4


@pytest.mark.parametrize(("fire", "ordinal"), [(-1, 0), (253_402_300_800_000, 0), (0, -1),
                                               (0, MAX_FIRE_ORDINAL + 1), (True, 0), (0, 1.0)])
def test_a_fire_time_or_ordinal_out_of_range_is_refused(fire: int, ordinal: int) -> None:
    with pytest.raises(SchedulingError):
        fire_key("digest", fire, ordinal)
