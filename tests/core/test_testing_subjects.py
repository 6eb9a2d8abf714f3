"""SimulatedObject's admit, approve, abort and resolve record the ``subject=`` they are given,
as the object's routes record the subject the Worker names."""

import asyncio
import json

import pytest

import threadline
from threadline.errors import ValidationFailed
from threadline.testing import SimulatedObject

app = threadline.Application()


@app.agent("asker")
async def asker(turn: threadline.Turn) -> dict:
    return {"ok": bool(await turn.approval("go", None))}


def _records(obj: SimulatedObject, submission_id: str) -> dict[str, dict]:
    rows = obj.storage.exec(
        "SELECT kind, body_json FROM tl_history WHERE submission_id = ? ORDER BY seq",
        submission_id)
    return {row["kind"]: json.loads(row["body_json"]) for row in rows}


def test_the_simulated_object_records_the_subject_it_is_given() -> None:
    async def go() -> None:
        async with SimulatedObject(app) as obj:
            first = obj.admit("t", "asker", 1, subject="user:alice")
            await obj.run_alarms()
            obj.approve(first.id, "go", subject="ops:carol")
            await obj.run_alarms()
            done = obj.submission(first.id)
            assert (done.outcome, done.submitted_by) == ("completed", "user:alice")
            records = _records(obj, first.id)
            assert records["approval.decided"]["decided_by"] == "ops:carol"
            assert records["submission.settled"]["submitted_by"] == "user:alice"

            second = obj.admit("t", "asker", 2)
            aborted = obj.abort(second.id, subject="ops:dave")
            assert (aborted.outcome, aborted.submitted_by) == ("aborted", None)
            settled = _records(obj, second.id)["submission.settled"]
            assert settled["aborted_by"] == "ops:dave" and "submitted_by" not in settled

    asyncio.run(go())


@pytest.mark.parametrize("subject", ["", "x" * 257, "two\nlines"])
def test_an_invalid_subject_is_refused_before_anything_is_written(subject: str) -> None:
    async def go() -> None:
        async with SimulatedObject(app) as obj:
            with pytest.raises(ValidationFailed) as refused:
                obj.admit("t", "asker", 1, subject=subject)
            assert refused.value.field == "subject"
            assert obj.storage.exec("SELECT COUNT(*) AS n FROM tl_submissions").scalar() == 0

    asyncio.run(go())
