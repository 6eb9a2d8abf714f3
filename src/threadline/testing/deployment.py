"""The simulated deployment: several spaces of one app, each a :class:`SimulatedObject`.

:class:`SimulatedDeployment` shares one manual clock between the spaces' objects, fires their
alarms earliest first and routes the messages they send each other as the Worker's ``THREADS``
binding does, recording each call as a :class:`Delivery` and failing calls in transit on
request (:class:`DeliveryFailure`) or holding them unanswered while a target hangs
(:class:`HungTarget`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from threadline.app import Application
from threadline.clock import ManualClock
from threadline.delivery.outbound import HttpPort
from threadline.maintenance import PassReport
from threadline.testing.alarm_invariants import QuiescenceError
from threadline.testing.simulated_object import DEFAULT_MAX_PASSES, SimulatedObject
from threadline.testing.storage_faults import Crash, is_eviction
from threadline.threads.model import check_space_id
from threadline.threads.routing import MessageEnvelope, Verdict


@dataclass
class DeliveryFailure:
    """Transient delivery failures installed by :meth:`SimulatedDeployment.fail_deliveries`."""

    #: The target space they apply to (None: any).
    to_space: str | None
    #: How many more deliveries will fail.
    remaining: int
    error: type[Exception]


class HungTarget:
    """A space whose object takes calls and never answers them, installed by
    :meth:`SimulatedDeployment.hang_deliveries`, until :meth:`release`."""

    def __init__(self, to_space: str) -> None:
        self.to_space = to_space
        #: Calls that reached the hung object so far.
        self.calls = 0
        self.released = False
        self._answer = asyncio.Event()

    def release(self) -> None:
        """The object answers again: calls still waiting fail in transit (the sender retries
        them), later ones reach it."""
        self.released = True
        self._answer.set()

    async def wait(self) -> None:
        self.calls += 1
        await self._answer.wait()


@dataclass(frozen=True)
class Delivery:
    """One call :class:`SimulatedDeployment` routed: the message, its target and the verdict
    (None when it failed in transit)."""

    message_id: str
    to_space: str
    verdict: Verdict | None


class _DeploymentRouter:
    """The router each space of a :class:`SimulatedDeployment` sends through."""

    def __init__(self, deployment: SimulatedDeployment) -> None:
        self._deployment = deployment

    async def deliver(self, envelope: MessageEnvelope) -> Verdict:
        return await self._deployment.route(envelope)


class SimulatedDeployment:
    """Several spaces of one ``app``, one :class:`SimulatedObject` each, sharing a
    :class:`~threadline.clock.ManualClock`, delivering messages between them as the Worker's
    ``THREADS`` binding does::

        async with SimulatedDeployment(app, spaces=["a", "b"]) as deployment:
            deployment.space("a").admit("t1", "forward", {"text": "hi"})
            await deployment.run_alarms()
            assert deployment.space("b").submissions("t2")[0].state == SubmissionState.SETTLED

    The objects of ``spaces`` are made at once (and started with the deployment); any other
    space's object is made on first use (:meth:`space`), like ``getByName``, and started by
    :meth:`start` or :meth:`run_alarms` (a delivery into it starts it). Messages into
    another space are admitted by that space's object (:meth:`Space.admit_message`); a
    delivery that fails in transit (:meth:`fail_deliveries`, or the target lost while
    admitting) raises to the sender, which retries. :meth:`crash_at` loses one space's object
    at a failpoint, as :meth:`SimulatedObject.crash_at` does. ``env`` and ``http`` are the
    Worker environment and outbound HTTP port every space's subscribers see (one Worker serves
    them all).
    """

    def __init__(
        self,
        app: Application,
        clock: ManualClock | None = None,
        seed: int = 0,
        *,
        spaces: Iterable[str] = (),
        check_alarm_invariant: bool = False,
        env: Any = None,
        http: HttpPort | None = None,
    ) -> None:
        self.app = app
        self.clock = clock if clock is not None else ManualClock()
        self.seed = seed
        self.check_alarm_invariant = check_alarm_invariant
        self.env = env
        self.http = http
        #: The spaces' objects, by space id, in the order they were made.
        self.objects: dict[str, SimulatedObject] = {}
        #: Every cross-space delivery routed, in order.
        self.deliveries: list[Delivery] = []
        self._failures: list[DeliveryFailure] = []
        self._hung: dict[str, HungTarget] = {}
        self._router = _DeploymentRouter(self)
        for name in spaces:
            self.space(name)

    def space(self, name: str) -> SimulatedObject:
        """The object of space ``name``, made (not started) on first use."""
        obj = self.objects.get(name)
        if obj is None:
            check_space_id(name)
            # A seed of its own per space: ids drawn in different spaces never coincide.
            obj = SimulatedObject(
                self.app, clock=self.clock, seed=self.seed * 1_000 + len(self.objects),
                check_alarm_invariant=self.check_alarm_invariant, space=name,
                router=self._router, env=self.env, http=self.http,
            )
            self.objects[name] = obj
        return obj

    async def start(self) -> None:
        """Start every space's object not started yet."""
        for obj in list(self.objects.values()):
            if not obj._started:
                await obj.start()

    def close(self) -> None:
        """Close every space's object."""
        for obj in self.objects.values():
            obj.close()

    async def __aenter__(self) -> SimulatedDeployment:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def run_alarms(
        self, until: int | None = None, max_passes: int = DEFAULT_MAX_PASSES
    ) -> list[PassReport]:
        """Fire the spaces' alarms like the platform, earliest first, until every slot is
        empty or later than ``until``; see :meth:`SimulatedObject.run_alarms`.

        Returns the reports of the passes that completed, in order. Raises
        :class:`QuiescenceError` after ``max_passes`` passes (all spaces together) when an
        alarm is still due.
        """
        completed: list[PassReport] = []
        passes = 0
        while True:
            due = await self._earliest()
            if due is None or (until is not None and due[0] > until):
                break
            if passes >= max_passes:
                slot, name = due
                raise QuiescenceError(
                    f"space {name!r}: " + self.objects[name]._not_quiescent(max_passes, slot))
            passes += 1
            report = await self._fire(*due)
            if report is not None:
                completed.append(report)
        if until is not None and until > self.clock.now_ms():
            self.clock.set(until)
        return completed

    async def fire_next(self) -> tuple[str, PassReport | None] | None:
        """Fire the earliest alarm of any space (the clock jumps to it): that space and its
        pass's report (None when the object was lost in it); None when no alarm is set."""
        due = await self._earliest()
        if due is None:
            return None
        return due[1], await self._fire(*due)

    async def _earliest(self) -> tuple[int, str] | None:
        # A space made by a delivery during the last pass is started before its alarm is read.
        await self.start()
        slots = [(int(obj.alarm_at), name) for name, obj in self.objects.items()
                 if obj.alarm_at is not None]
        return min(slots) if slots else None

    async def _fire(self, slot: int, name: str) -> PassReport | None:
        obj = self.objects[name]
        if slot > self.clock.now_ms():
            self.clock.set(slot)
        obj.storage.take_due_alarm(self.clock.now_ms())
        return await obj._fire()

    def crash_at(self, space: str, location: str, occurrence: int = 1) -> Crash:
        """Lose the object of ``space`` at the ``occurrence``-th arrival at failpoint
        ``location`` (see :meth:`SimulatedObject.crash_at`)."""
        return self.space(space).crash_at(location, occurrence)

    def fail_deliveries(
        self, times: int = 1, *, to_space: str | None = None,
        error: type[Exception] = ConnectionError,
    ) -> DeliveryFailure:
        """Make the next ``times`` deliveries (into ``to_space``, or any) raise ``error`` in
        transit, before the target sees them, as an unreachable object would."""
        failure = DeliveryFailure(to_space, times, error)
        self._failures.append(failure)
        return failure

    def hang_deliveries(self, to_space: str) -> HungTarget:
        """Make the object of ``to_space`` hang: every call into it waits, unanswered, until
        the returned :class:`HungTarget` is released (the sender's call timeout ends it
        first), as an overloaded or wedged object would."""
        hung = HungTarget(to_space)
        self._hung[to_space] = hung
        return hung

    async def route(self, envelope: MessageEnvelope) -> Verdict:
        """Deliver one message to its target space's object (the router's work)."""
        hung = self._hung.get(envelope.to_space)
        if hung is not None and not hung.released:
            self.deliveries.append(Delivery(envelope.message_id, envelope.to_space, None))
            await hung.wait()
            raise ConnectionError(f"space {envelope.to_space!r} did not answer")
        for failure in self._failures:
            if failure.remaining > 0 and failure.to_space in (None, envelope.to_space):
                failure.remaining -= 1
                self.deliveries.append(Delivery(envelope.message_id, envelope.to_space, None))
                raise failure.error(f"injected delivery failure to {envelope.to_space!r}")
        target = self.space(envelope.to_space)
        if not target._started:
            await target.start()
        try:
            verdict = target.space.admit_message(
                envelope.message_id, envelope.to_thread, envelope.agent, envelope.input_json,
                hops=envelope.hops, from_space=envelope.from_space,
                from_thread=envelope.from_thread)
        except BaseException as exc:
            if not is_eviction(exc):
                raise
            # The target was lost while admitting: the caller sees a failed call.
            self.deliveries.append(Delivery(envelope.message_id, envelope.to_space, None))
            await target.evict()
            raise ConnectionError(f"space {envelope.to_space!r} was reset") from None
        self.deliveries.append(Delivery(envelope.message_id, envelope.to_space, verdict))
        return verdict


__all__ = ["Delivery", "DeliveryFailure", "HungTarget", "SimulatedDeployment"]
