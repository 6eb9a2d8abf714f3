"""The API's literal types stay in step with the runtime's enums they mirror."""

from __future__ import annotations

from typing import get_args

from threadline.api import models
from threadline.scheduling import LaneState
from threadline.threads.model import (
    AbortState,
    Outcome,
    StepEffect,
    StepState,
    SubmissionState,
    WaitKind,
    WaitState,
)


def _values(enum: type) -> set[str]:
    return {member.value for member in enum}  # type: ignore[attr-defined]


def _literal(model: type[models.BaseModel], field: str) -> set[str]:
    pending = [model.model_fields[field].annotation]
    found: set[str] = set()
    while pending:
        for arg in get_args(pending.pop()):
            if isinstance(arg, str):
                found.add(arg)
            else:
                pending.append(arg)
    return found


def test_state_literals_mirror_the_runtime_enums() -> None:
    assert set(get_args(models.StateName)) == _values(SubmissionState)
    assert set(get_args(models.OpenStateName)) == _values(SubmissionState) - {"settled"}
    assert _literal(models.SubmissionView, "outcome") == _values(Outcome)
    assert _literal(models.WaitView, "kind") == _values(WaitKind)
    assert _literal(models.WaitView, "state") == _values(WaitState)
    assert _literal(models.JournalStepView, "effect") == _values(StepEffect)
    assert _literal(models.JournalStepView, "state") == _values(StepState)
    assert _literal(models.AbortView, "state") == _values(AbortState)
    assert _literal(models.LaneView, "state") == _values(LaneState)
