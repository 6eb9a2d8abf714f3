"""The execution journal (``tl_journal``): one entry per durable step of a submission.

An entry is ``finished`` once its value is committed; replay returns that value instead of
running the step again. An ``uncertain`` step also gets a ``started`` entry BEFORE its function
runs: if the lease expires while that entry is still ``started``, the step may have acted, so
recovery turns the submission into an Unknown Outcome instead of running it twice. An
idempotent step needs no start marker: recovery treats an idempotent step in flight exactly like
no step in flight (re-run it), so the marker would be a write that changes no decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadline.storage.port import Row, Storage
from threadline.threads.model import JsonValue, StepEffect, StepState, decode_json

_READ = (
    "SELECT step_key, position, effect, state, attempt, value_json, error_json"
    " FROM tl_journal WHERE submission_id = ? AND step_key = ?"
)
_UPSERT = (
    "INSERT INTO tl_journal (submission_id, step_key, position, effect, state, attempt,"
    " value_json, error_json, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (submission_id, step_key) DO UPDATE SET position = excluded.position,"
    " effect = excluded.effect, state = excluded.state, attempt = excluded.attempt,"
    " value_json = excluded.value_json, error_json = excluded.error_json,"
    " started_at = excluded.started_at, finished_at = excluded.finished_at"
)
_IN_FLIGHT_UNCERTAIN = (
    "SELECT step_key, position, effect, state, attempt, value_json, error_json"
    " FROM tl_journal WHERE submission_id = ? AND state = 'started' AND effect = 'uncertain'"
    " ORDER BY position LIMIT 1"
)
# Only a step still `started` can be resolved: a resolution that lost a race changes nothing.
_RESOLVE = (
    "UPDATE tl_journal SET state = ?, value_json = ?, error_json = ?, finished_at = ?"
    " WHERE submission_id = ? AND step_key = ? AND state = 'started'"
)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journaled step."""

    step_key: str
    position: int
    effect: StepEffect
    state: StepState
    attempt: int
    value: JsonValue
    error: JsonValue


def _entry(row: Row | None) -> JournalEntry | None:
    if row is None:
        return None
    return JournalEntry(
        step_key=row["step_key"],
        position=int(row["position"]),
        effect=StepEffect(row["effect"]),
        state=StepState(row["state"]),
        attempt=int(row["attempt"]),
        value=decode_json(row["value_json"]),
        error=decode_json(row["error_json"]),
    )


def read_entry(storage: Storage, submission_id: str, step_key: str) -> JournalEntry | None:
    """The entry for ``step_key``, or None when the step never reached the journal."""
    return _entry(storage.exec(_READ, submission_id, step_key).first())


def in_flight_uncertain(storage: Storage, submission_id: str) -> JournalEntry | None:
    """The earliest uncertain step that started and never finished or failed, if any."""
    return _entry(storage.exec(_IN_FLIGHT_UNCERTAIN, submission_id).first())


def record(
    storage: Storage,
    submission_id: str,
    step_key: str,
    *,
    position: int,
    effect: StepEffect,
    state: StepState,
    attempt: int,
    now: int,
    value_json: str | None = None,
    error_json: str | None = None,
) -> None:
    """Write the entry for ``step_key`` (an earlier failed or started entry is replaced)."""
    storage.exec(
        _UPSERT,
        submission_id,
        step_key,
        position,
        effect.value,
        state.value,
        attempt,
        value_json,
        error_json,
        now,
        None if state is StepState.STARTED else now,
    )


def resolve_started(
    storage: Storage,
    submission_id: str,
    step_key: str,
    *,
    state: StepState,
    now: int,
    value_json: str | None = None,
    error_json: str | None = None,
) -> bool:
    """Close a ``started`` entry as finished (accepted value) or failed (to re-run it).

    Compare-and-set on ``state = 'started'``: a second resolution finds nothing to change and
    returns False.
    """
    written = storage.exec(
        _RESOLVE, state.value, value_json, error_json, now, submission_id, step_key
    ).changed
    return written == 1


__all__ = ["JournalEntry", "in_flight_uncertain", "read_entry", "record", "resolve_started"]
