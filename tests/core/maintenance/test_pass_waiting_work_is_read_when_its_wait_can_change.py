"""Waiting work is not re-read by every pass: the input queued behind a head suspended on an
approval or a far timer leaves the live range with it, and its Thread is read again only when
its wait can change (the approval decided, an abort, the timer due, an Unknown Outcome before
it resolved). Every one of those brings the Thread back; none is lost."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from threadline import Application
from threadline.scheduling import read_state
from threadline.testing import SimulatedObject
from threadline.threads.model import Outcome, Submission, SubmissionState

DAY_S = 86_400.0

app = Application()
order: list[str] = []


@app.agent("echo")
async def echo(turn: Any) -> Any:
    if turn.thread_id == "t":
        order.append(f"t:{turn.input}")
    return {"echo": turn.input}


@app.agent("ask")
async def ask(turn: Any) -> Any:
    decision = await turn.approval("go")
    order.append(f"{turn.thread_id}:ask")
    return {"approved": decision.approved}


@app.agent("nap")
async def nap(turn: Any) -> Any:
    await turn.sleep(DAY_S)
    order.append(f"{turn.thread_id}:nap")
    return "rested"


@app.agent("risky")
async def risky(turn: Any) -> Any:
    async def send() -> str:
        return "sent"

    return await turn.step("send", send, effect="uncertain")


class Reads:
    """Counts the statements that name one Thread or one of its submissions."""

    def __init__(self, obj: SimulatedObject, thread: str) -> None:
        self.obj = obj
        self.thread = thread
        self.seen: Counter[str] = Counter()
        self.install()

    def install(self) -> None:
        storage = self.obj.storage
        real = storage.exec
        names = {self.thread} | {s.id for s in self.obj.submissions(self.thread)}

        def exec_(sql: str, *params: Any) -> Any:
            if names & {p for p in params if isinstance(p, str)}:
                self.seen[sql.split(" FROM ")[0][:40]] += 1
            return real(sql, *params)

        storage.exec = exec_  # type: ignore[method-assign]

    def total(self) -> int:
        return sum(self.seen.values())


async def _elsewhere(obj: SimulatedObject, n: int) -> None:
    """Actionable passes for other Threads (a full scan each: they begin dirty)."""
    for i in range(n):
        obj.admit(f"other-{i}", "echo", i)
        reports = await obj.run_alarms(until=obj.clock.now_ms() + 1_000)
        assert reports and reports[0].dispatched == 1


async def _waiting(
    head_agent: str, body: Callable[[SimulatedObject, Submission, list[Submission]],
                                    Awaitable[None]],
    *, lost_before: bool = False,
) -> None:
    """A Thread ``t`` whose head suspends with two inputs queued behind it: later passes
    elsewhere do not read ``t``; then ``body`` changes its wait. With ``lost_before``, a
    ``risky`` submission before the head is lost in its uncertain step first (an Unknown
    Outcome the head runs past)."""
    order.clear()
    async with SimulatedObject(app, check_alarm_invariant=True) as obj:
        if lost_before:
            obj.admit("t", "risky", {})
            obj.crash_at("step:started")
        head = obj.admit("t", head_agent, {})
        queued = [obj.admit("t", "echo", n) for n in (1, 2)]
        # Long enough for a lost Attempt's crash fallback, far shorter than the timer.
        await obj.run_alarms(until=obj.clock.now_ms() + 600_000)
        assert obj.submission(head.id).state is SubmissionState.SUSPENDED
        assert [obj.submission(s.id).state for s in queued] == [SubmissionState.QUEUED] * 2
        reads = Reads(obj, "t")
        await _elsewhere(obj, 3)
        assert reads.total() == 0, reads.seen
        # A full scan visits nothing of it: it is not counted as open work either.
        assert read_state(obj.storage).nonterminal == 0
        await body(obj, head, queued)


def test_input_queued_behind_an_approval_is_read_again_once_it_is_decided() -> None:
    async def decide(obj: SimulatedObject, head: Submission, queued: list[Submission]) -> None:
        obj.approve(head.id, "go")
        await obj.run_alarms()
        assert obj.submission(head.id).result == {"approved": True}
        assert all(obj.submission(s.id).outcome is Outcome.COMPLETED for s in queued)
        assert order == ["t:ask", "t:1", "t:2"]
        assert obj.alarm_at is None

    asyncio.run(_waiting("ask", decide))


def test_input_queued_behind_a_suspended_head_is_read_again_once_the_head_is_aborted() -> None:
    async def abort(obj: SimulatedObject, head: Submission, queued: list[Submission]) -> None:
        obj.abort(head.id, "no")
        await obj.run_alarms()
        assert obj.submission(head.id).outcome is Outcome.ABORTED
        assert all(obj.submission(s.id).outcome is Outcome.COMPLETED for s in queued)
        assert order == ["t:1", "t:2"]

    asyncio.run(_waiting("ask", abort))


def test_input_queued_behind_a_far_timer_is_read_again_once_the_timer_is_due() -> None:
    async def wake(obj: SimulatedObject, head: Submission, queued: list[Submission]) -> None:
        reads = Reads(obj, "t")
        # The alarm is armed for the timer; nothing before it reads the Thread.
        due = obj.alarm_at
        assert due is not None and due > obj.clock.now_ms() + 3_600_000
        await _elsewhere(obj, 2)
        await obj.run_alarms(until=due - 1)
        assert reads.total() == 0, reads.seen
        reports = await obj.run_alarms()
        assert obj.clock.now_ms() >= due and reports
        assert obj.submission(head.id).result == "rested"
        assert all(obj.submission(s.id).outcome is Outcome.COMPLETED for s in queued)
        assert order == ["t:nap", "t:1", "t:2"]
        assert obj.alarm_at is None

    asyncio.run(_waiting("nap", wake))


def test_held_input_stays_held_while_an_unknown_outcome_before_its_head_is_resolved() -> None:
    # t: risky (lost in its uncertain step: Unknown Outcome), ask (runs past it, suspends),
    # then the queued input. Resolving the Unknown Outcome runs it; the input behind the
    # still suspended head stays held, and is read again once that head is decided.
    async def resolve(obj: SimulatedObject, head: Submission, queued: list[Submission]) -> None:
        (unknown,) = [s for s in obj.submissions("t") if s.agent == "risky"]
        assert unknown.state is SubmissionState.UNKNOWN
        obj.resolve(unknown.id, "accept", "sent")
        await obj.run_alarms()
        assert obj.submission(unknown.id).result == "sent"
        assert obj.submission(head.id).state is SubmissionState.SUSPENDED
        assert [obj.submission(s.id).state for s in queued] == [SubmissionState.QUEUED] * 2
        reads = Reads(obj, "t")
        await _elsewhere(obj, 2)
        assert reads.total() == 0, reads.seen
        obj.approve(head.id, "go")
        await obj.run_alarms()
        assert all(obj.submission(s.id).outcome is Outcome.COMPLETED for s in queued)
        assert order == ["t:ask", "t:1", "t:2"]

    asyncio.run(_waiting("ask", resolve, lost_before=True))


def test_input_admitted_behind_held_input_is_held_too_and_all_of_it_runs_in_order() -> None:
    async def admit_more(obj: SimulatedObject, head: Submission,
                         queued: list[Submission]) -> None:
        later = obj.admit("t", "echo", 3)
        await obj.run_alarms()
        assert obj.submission(later.id).state is SubmissionState.QUEUED
        reads = Reads(obj, "t")
        await _elsewhere(obj, 2)
        assert reads.total() == 0, reads.seen
        await obj.evict()  # held input is durable: the wait still brings it back
        obj.approve(head.id, "go")
        await obj.run_alarms()
        assert obj.submission(later.id).outcome is Outcome.COMPLETED
        assert order == ["t:ask", "t:1", "t:2", "t:3"]

    asyncio.run(_waiting("ask", admit_more))


def test_held_input_can_be_aborted_and_the_rest_stays_held() -> None:
    async def abort_one(obj: SimulatedObject, head: Submission,
                        queued: list[Submission]) -> None:
        obj.abort(queued[0].id)
        await obj.run_alarms()
        assert obj.submission(queued[0].id).outcome is Outcome.ABORTED
        reads = Reads(obj, "t")
        await _elsewhere(obj, 2)
        assert reads.total() == 0, reads.seen
        obj.approve(head.id, "go")
        await obj.run_alarms()
        assert obj.submission(queued[1].id).outcome is Outcome.COMPLETED
        assert order == ["t:ask", "t:2"]

    asyncio.run(_waiting("ask", abort_one))


def test_the_pass_that_holds_input_behind_a_suspended_head_no_longer_counts_it_open() -> None:
    # The pass in which the head suspends holds the input behind it at its checkpoint: the
    # figure it records already leaves out the Thread, as every later full scan does.
    async def run() -> None:
        async with SimulatedObject(app, check_alarm_invariant=True) as obj:
            head = obj.admit("t", "ask", {})
            queued = [obj.admit("t", "echo", n) for n in (1, 2)]
            reports = await obj.run_alarms()
            assert obj.submission(head.id).state is SubmissionState.SUSPENDED
            assert [obj.submission(s.id).state for s in queued] == [SubmissionState.QUEUED] * 2
            assert reports[-1].dispatched == 1
            assert (reports[-1].nonterminal, read_state(obj.storage).nonterminal) == (0, 0)
            assert obj.alarm_at is None

    asyncio.run(run())
