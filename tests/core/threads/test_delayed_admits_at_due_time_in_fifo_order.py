"""A delayed submission takes its place in its Thread's FIFO when it falls due, behind the input
the Thread received meanwhile, and runs after its time, never before."""

from __future__ import annotations

import asyncio

from delayed_support import MINUTE, START, Ran, admitted, settled, simulated

from threadline.threads.model import ScheduledSubmission, SubmissionState


async def _behind_earlier_input() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        due = START + 10 * MINUTE
        later = obj.admit("t", "echo", "later", not_before=due)
        held = obj.admit("t", "gate", "held")  # holds the Thread until approved
        behind = obj.admit("t", "echo", "behind")
        await obj.run_alarms(until=due - 1)
        assert isinstance(obj.find(later.id), ScheduledSubmission)
        assert admitted(obj, held.id).state is SubmissionState.SUSPENDED
        await obj.run_alarms(until=due)
        taken = admitted(obj, later.id)
        assert taken.seq == 3 and taken.state is SubmissionState.QUEUED
        assert taken.not_before == due
        obj.approve(held.id, "go")
        await obj.run_alarms()
        assert ran.inputs() == ["held", "held", "behind", "later"]
        assert [settled(obj, s.id).seq for s in (held, behind, later)] == [1, 2, 3]


def test_a_delayed_submission_falls_due_behind_the_input_its_thread_received_meanwhile() -> None:
    asyncio.run(_behind_earlier_input())


async def _made_order() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        due = START + MINUTE
        made = [obj.admit("t", "echo", f"d{n}", not_before=due) for n in range(6)]
        await obj.run_alarms()
        assert [admitted(obj, s.id).seq for s in made] == [1, 2, 3, 4, 5, 6]
        assert ran.inputs() == [f"d{n}" for n in range(6)]


def test_delayed_submissions_due_at_the_same_time_keep_the_order_they_were_made_in() -> None:
    asyncio.run(_made_order())


async def _not_before() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        due = START + MINUTE + 123
        sub = obj.admit("t", "echo", "d", not_before=due)
        await obj.run_alarms(until=due - 1)
        assert ran.inputs() == []
        assert isinstance(obj.find(sub.id), ScheduledSubmission)
        await obj.run_alarms()
        assert ran.at("d") >= due
        assert settled(obj, sub.id).result == {"got": "d"}
        assert obj.alarm_at is None


def test_a_delayed_submission_runs_after_its_time_and_not_before() -> None:
    asyncio.run(_not_before())


async def _sooner() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        first = obj.admit("a", "echo", "first", not_before=START + MINUTE)
        obj.admit("b", "echo", "far", not_before=START + 60 * MINUTE)
        await obj.run_alarms(until=START + 2 * MINUTE)
        settled(obj, first.id)
        # The lane's last wave named the far one as its next deadline; a sooner one made
        # afterwards is admitted at its own time, not then.
        sooner = obj.admit("c", "echo", "sooner", not_before=START + 3 * MINUTE)
        await obj.run_alarms(until=START + 4 * MINUTE)
        assert ran.at("sooner") < START + 4 * MINUTE
        settled(obj, sooner.id)
        assert ran.inputs() == ["first", "sooner"]


def test_a_delayed_submission_due_sooner_than_the_lanes_next_wave_is_admitted_on_time() -> None:
    asyncio.run(_sooner())


async def _batches() -> None:
    ran = Ran()
    async with simulated(ran) as obj:
        obj.space.delayed._batch = 2  # a batch per transaction, smaller than what is due
        await obj.run_alarms()  # a new object's first pass
        due = START + MINUTE
        made = [obj.admit(f"t{n % 2}", "echo", f"d{n}", not_before=due) for n in range(7)]
        later = obj.admit("t0", "echo", "later", not_before=due + MINUTE)
        reports = await obj.run_alarms(until=due)
        assert len(reports) == 1 and obj.hits("maintenance:delayed:admitted") == 4
        assert [admitted(obj, s.id).seq for s in made] == [1, 1, 2, 2, 3, 3, 4]
        assert isinstance(obj.find(later.id), ScheduledSubmission)
        await obj.run_alarms()
        assert ran.inputs()[-1] == "later" and len(ran.inputs()) == 8


def test_more_due_than_one_batch_are_all_admitted_by_one_wave_in_order() -> None:
    asyncio.run(_batches())
