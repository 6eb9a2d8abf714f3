"""``ctx.submit`` admits once per fire and a fire completes once, wherever the object is lost:
the pending fire is recorded before the function is called, so the run after a loss serves the
same fire with the same default keys (``fire_key`` of the schedule, the fire and the
submission's ordinal) and the ledger replays what was admitted; an explicit key is used as
given; the completion is a compare-and-set, and a run lost after it is not run again."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from schedules_support import (
    MINUTE,
    START,
    Runs,
    app_with_echo,
    clock,
    completions,
    fire_ms,
    log_completions,
    row,
)

from threadline import Conflict, ScheduleContext, SchedulingError, ValidationFailed
from threadline.errors import Evicted
from threadline.schedules import fire_key
from threadline.testing import SimulatedObject

FIVE = 5 * MINUTE
FIRST = (START // FIVE + 1) * FIVE
#: Where the object is lost: inside the function between two submissions (by the test), or
#: at a failpoint of the run.
MID_RUN = "mid-run"
LOCATIONS = (MID_RUN, "schedule:fire:recorded", "schedule:run:returned",
             "schedule:run:completed")


async def _scenario(location: str) -> tuple[Runs, list[str]]:
    runs = Runs()
    lost = {"done": False}
    app = app_with_echo()

    @app.every(timedelta(minutes=5), id="fanout")
    async def fanout(ctx: ScheduleContext) -> None:
        fire = fire_ms(ctx)
        runs.calls.append(("fanout", fire, obj.clock.now_ms(), None))
        await ctx.submit("a", {"fire": fire})
        if location == MID_RUN and not lost["done"]:
            lost["done"] = True
            raise Evicted(MID_RUN)
        await ctx.submit("b", {"fire": fire}, agent="echo")
        await ctx.submit("c", {"fire": fire}, key=f"custom-{fire}")
        runs.fires.append(("fanout", fire))

    obj = SimulatedObject(app, clock=clock(), check_alarm_invariant=True)
    async with obj:
        log_completions(obj)
        if location != MID_RUN:
            obj.crash_at(location)
        await obj.run_alarms(until=FIRST + FIVE)
        assert obj.evictions == 1
        problems = []
        for thread, key in (("a", fire_key("fanout", FIRST)),
                            ("b", fire_key("fanout", FIRST, 1)), ("c", f"custom-{FIRST}"),
                            ("a", fire_key("fanout", FIRST + FIVE)),
                            ("b", fire_key("fanout", FIRST + FIVE, 1)),
                            ("c", f"custom-{FIRST + FIVE}")):
            found = [sub for sub in obj.submissions(thread) if sub.idempotency_key == key]
            if len(found) != 1:
                problems.append(f"{thread} {key}: {len(found)} submissions")
        if len(obj.submissions()) != 6:
            problems.append(f"{len(obj.submissions())} submissions in all")
        if completions(obj) != [("fanout", FIRST), ("fanout", FIRST + FIVE)]:
            problems.append(f"completions {completions(obj)}")
        stored = row(obj, "fanout")
        assert stored is not None and stored.pending_fire is None
        return runs, problems


@pytest.mark.parametrize("location", LOCATIONS)
def test_a_loss_anywhere_in_a_run_admits_each_submission_once_and_completes_the_fire_once(
    location: str,
) -> None:
    runs, problems = asyncio.run(_scenario(location))
    assert not problems, problems
    calls = [fire for _, fire, _, _ in runs.calls]
    if location in ("schedule:fire:recorded", "schedule:run:completed"):
        # Lost before the function was called, or after the completion committed: the
        # function ran once for the fire.
        assert calls == [FIRST, FIRST + FIVE]
    else:
        # Lost while it ran: the same fire runs again (delivery is at least once).
        assert calls == [FIRST, FIRST, FIRST + FIVE]


async def _refusals() -> list[str]:
    seen: list[str] = []
    app = app_with_echo()

    @app.agent("other")
    async def other(turn: object) -> None:
        return None

    @app.every(timedelta(minutes=5), id="strict")
    async def strict(ctx: ScheduleContext) -> None:
        await ctx.submit("t", 1, agent="echo", key="same")
        for attempt in (
            lambda: ctx.submit("t", 2, agent="echo", key="same"),   # the key, other input
            lambda: ctx.submit("bad id!", 1, agent="echo"),
            lambda: ctx.submit("fresh", 1),                          # two agents: name one
            lambda: ctx.submit("t", 1, agent="ghost"),
            lambda: ctx.submit("t", float("nan"), agent="echo"),
        ):
            try:
                await attempt()
            except (Conflict, ValidationFailed) as exc:
                seen.append(type(exc).__name__)
        # The Thread's latest agent is the default: no agent named is fine here.
        await ctx.submit("t", 3)

    async with SimulatedObject(app, clock=clock()) as obj:
        await obj.run_alarms(until=FIRST)
        assert [sub.input for sub in obj.submissions("t")] == [1, 3]
        stored = row(obj, "strict")
        assert stored is not None and stored.last_fire == FIRST
    return seen


def test_submit_checks_what_it_admits_like_the_api() -> None:
    assert asyncio.run(_refusals()) == ["Conflict", "ValidationFailed", "ValidationFailed",
                                        "ValidationFailed", "ValidationFailed"]


async def _after_the_run() -> BaseException | None:
    kept: list[ScheduleContext] = []
    app = app_with_echo()

    @app.every(timedelta(minutes=5), id="leaky")
    async def leaky(ctx: ScheduleContext) -> None:
        kept.append(ctx)

    async with SimulatedObject(app, clock=clock()) as obj:
        await obj.run_alarms(until=FIRST)
        try:
            await kept[0].submit("t", 1)
        except SchedulingError as exc:
            return exc
        finally:
            assert obj.submissions() == []
    return None


def test_a_run_that_has_ended_submits_nothing() -> None:
    refused = asyncio.run(_after_the_run())
    assert isinstance(refused, SchedulingError) and "has ended" in str(refused)
