"""``python -m bench.hung_message_target``: what one hung target space costs the others.

One submission in space ``a`` sends ``--hung`` messages to space ``c``, whose object takes
calls and never answers them; ``--after`` simulated minutes later another one sends a message
to the healthy space ``b`` and one into its own space ``a``. Under
:class:`threadline.testing.SimulatedDeployment` (default ``RuntimeConfig``, a manual clock),
alarms fire until ``--hours`` of simulated time have passed since then; printed: the simulated
time from that second send until the message to ``b`` and the one into ``a`` were admitted at
their targets and until those submissions settled (or that they were not), the calls made to
``c``, and the messages lane's state at the end.
Then ``c`` answers again, and the order in which its messages were admitted is printed.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from threadline import Application, ManualClock, Turn
from threadline.scheduling import MESSAGES
from threadline.testing import SimulatedDeployment

START = 1_700_000_000_000
HOUR_MS = 3_600_000


def _app(hung: int) -> Application:
    app = Application()

    @app.agent("scatter")
    async def scatter(turn: Turn) -> Any:
        if turn.input == "hung":
            for n in range(hung):
                await turn.send("c", "inbox", {"n": n}, agent="echo")
        else:
            await turn.send("b", "inbox", {"n": "healthy"}, agent="echo")
            await turn.send("a", "inbox", {"n": "own"}, agent="echo")
        return "sent"

    @app.agent("echo")
    async def echo(turn: Turn) -> Any:
        return turn.input

    return app


async def measure(hung: int, after_minutes: float, hours: float) -> dict[str, Any]:
    """Run the scenario; the figures as a dict (times in simulated ms from the second send,
    None: not by the end)."""
    async with SimulatedDeployment(_app(hung), clock=ManualClock(START),
                                   spaces=("a", "b", "c")) as world:
        stuck = world.hang_deliveries("c")
        world.space("a").admit("first", "scatter", "hung")
        sent = START + int(after_minutes * 60_000)
        await world.run_alarms(until=sent, max_passes=1_000_000)
        world.space("a").admit("second", "scatter", "others")
        horizon = sent + int(hours * HOUR_MS)
        while world.clock.now_ms() < horizon and not all(
                s.settled_at for space in ("a", "b")
                for s in world.space(space).submissions("inbox")):
            fired = await world.fire_next()
            if fired is None or world.clock.now_ms() > horizon:
                break
        await world.run_alarms(until=horizon, max_passes=1_000_000)
        lane = world.space("a").space.scheduler.due_queue.get(MESSAGES)
        figures: dict[str, Any] = {
            "healthy": _when(world, "b", sent), "own": _when(world, "a", sent),
            "hung_calls": stuck.calls,
            "lane": None if lane is None else (lane.state.value, lane.stalls),
        }
        stuck.release()
        await world.run_alarms(max_passes=1_000_000)
        figures["released_ms"] = world.clock.now_ms() - horizon
        figures["hung_order"] = [s.input for s in world.space("c").submissions("inbox")]
        return figures


def _when(world: SimulatedDeployment, space: str, sent: int) -> tuple[int | None, int | None]:
    """When the message into ``space`` was admitted there and when it settled (ms after it
    was sent; None: not by the end)."""
    inbox = world.space(space).submissions("inbox")
    if not inbox:
        return None, None
    settled = inbox[0].settled_at
    return inbox[0].created_at - sent, None if settled is None else settled - sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hung", type=int, default=4, help="messages sent to the hung space")
    parser.add_argument("--after", type=float, default=10.0,
                        help="simulated minutes between the two sends")
    parser.add_argument("--hours", type=float, default=4.0, help="simulated hours to run")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.hung, args.after, args.hours))

    def when(times: tuple[int | None, int | None]) -> str:
        shown = [f"{ms / 1000:.1f} s" if ms is not None else f"not after {args.hours:g} h"
                 for ms in times]
        return f"admitted after {shown[0]}, settled after {shown[1]}"

    print(f"one hung target, {args.hung} messages to it; {args.after:g} min later one message"
          f" to a healthy space and one into the own space; {args.hours:g} simulated hours")
    print(f"  message to the healthy space: {when(figures['healthy'])}")
    print(f"  message into the own space:   {when(figures['own'])}")
    print(f"  calls into the hung space: {figures['hung_calls']}")
    print(f"  messages lane at the end (state, stalls): {figures['lane']}")
    print(f"  once it answers: all admitted within {figures['released_ms'] / 1000:.1f} s, "
          f"in the order {figures['hung_order']}")


if __name__ == "__main__":
    main()
