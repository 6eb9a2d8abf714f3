"""``Space``: one object's logic, independent of the platform it runs on.

The deployed Durable Object (``threadline.worker.ThreadObjectBase``) and the simulated one in
``threadline.testing`` are thin wrappers around a ``Space``, so tests run the deployed logic.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime
from typing import Any

from threadline.api.context import ApiContext
from threadline.api.http import Request, Response
from threadline.api.routes import route, route_space
from threadline.app import Application
from threadline.clock import Clock, SystemClock
from threadline.delivery.outbound import HttpPort, HttpxPort
from threadline.environment import Environment
from threadline.errors import SchedulingError
from threadline.fetching import FetchPort
from threadline.ids import IdSource, RandomIds
from threadline.maintenance import LaneRunner, Maintenance, MaintenanceParts, PassReport
from threadline.maintenance.bindings import BindingWaits
from threadline.maintenance.delayed_lane import DELAYED_DISPATCH_TIMEOUT_MS, DelayedAdmissions
from threadline.maintenance.faults import (
    RECOVERY_EVENTS_DISPATCH_TIMEOUT_MS,
    RecoveryEvents,
    RecoveryFaults,
)
from threadline.maintenance.host_lanes import epoch_ms, handler_for
from threadline.maintenance.message_lane import MESSAGES_DISPATCH_TIMEOUT_MS, MessageDelivery
from threadline.maintenance.publication_lane import Publication
from threadline.maintenance.readout import MaintenanceReadout
from threadline.maintenance.retention_lane import RETENTION_DISPATCH_TIMEOUT_MS, Retention
from threadline.maintenance.schedule_lanes import ScheduleRunner, lanes_key
from threadline.maintenance.subscriber_cursors import subscribers_key
from threadline.maintenance.subscriber_operations import SubscriberOperations
from threadline.pause import Pause, no_pause
from threadline.scheduling import (
    DELAYED,
    MESSAGES,
    RECOVERY_EVENTS,
    RETENTION,
    Failpoints,
    Scheduler,
    build_scheduler,
)
from threadline.scheduling import state as generation
from threadline.storage.port import Storage
from threadline.storage.schema import migrate, schema_version
from threadline.threads import message_rows
from threadline.threads.model import digest
from threadline.threads.routing import Accepted, MessageRouter, Verdict
from threadline.threads.runtime import ThreadRuntime

_log = logging.getLogger("threadline")
#: Requests that may write: the first successful one that names the space stores the name.
_READS = frozenset({"GET", "HEAD"})


class Space:
    """The Threads of one space, over one storage, clock, randomness and id source.

    One instance per object incarnation: its in-memory parts (the gate's active mutations, the
    runtime's active Attempts, its incarnation id) are rebuilt empty by the next one.

    ``name`` is the space's id as the platform gives it to this incarnation (the deployed
    object's ``ctx.id.name``), None when it does not: the platform names an object a request
    or an RPC reaches, not one its alarm starts after an eviction or a restart. The object
    stores the name the first time it learns it (a named start, else the ``{space}`` of the
    first successful request that may write) and an incarnation given none uses the stored
    one, so subscribers' envelopes keep naming the space and messages an agent sends into it
    are still admitted locally, in one transaction. A stored name is never replaced: a
    different one given later is logged and ignored (one object serves one name).
    ``router`` delivers messages into other spaces (see :mod:`threadline.threads.routing`); without
    one they fail with ``NoRoute``. ``pause`` is what a long pass awaits between Attempts to
    let the platform deliver waiting requests (see :mod:`threadline.pause`; by default it
    returns without suspending).
    """

    def __init__(
        self,
        app: Application,
        storage: Storage,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        ids: IdSource | None = None,
        failpoints: Failpoints | None = None,
        name: str | None = None,
        router: MessageRouter | None = None,
        env: Any = None,
        http: HttpPort | None = None,
        pause: Pause | None = None,
    ) -> None:
        self.app = app
        #: The space's id, once known (see the class docstring).
        self.name = name
        self._name_stored = False
        self._name_conflict_logged = False
        self.storage = storage
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.rng = rng if rng is not None else random.SystemRandom()
        self.ids: IdSource = ids if ids is not None else RandomIds(self.rng)
        self.schema_version = 0
        config = app.config
        self.scheduler: Scheduler = build_scheduler(
            storage, self.clock, config, self.rng, failpoints
        )
        gate = self.scheduler.gate
        #: The Worker's environment as agents, lanes and schedules read it.
        self.env = Environment(env)
        self.runtime = ThreadRuntime(
            storage, app.agents, gate=gate, failpoints=self.scheduler.failpoints, config=config,
            clock=self.clock, rng=self.rng, ids=self.ids, host_lanes=app.lanes.ids,
            env=self.env, fetch=_fetch_port(http),
        )
        self.faults = RecoveryFaults(storage, gate, self.clock)
        self.recovery_events = RecoveryEvents(storage, self.clock, app.recovery_event_hook)
        self.bindings = BindingWaits(storage, gate, self.clock)
        self.lanes = LaneRunner(storage, gate, self.scheduler.due_queue, self.clock, config,
                                self.rng)
        self.lanes.register(RECOVERY_EVENTS, self.recovery_events.run_lane,
                            dispatch_timeout_ms=RECOVERY_EVENTS_DISPATCH_TIMEOUT_MS)
        self.delayed = DelayedAdmissions(self.runtime.ledger, self.clock,
                                         self.scheduler.failpoints)
        self.lanes.register(DELAYED, self.delayed.run_lane,
                            dispatch_timeout_ms=DELAYED_DISPATCH_TIMEOUT_MS)
        self.messages = MessageDelivery(
            storage, gate, app.agents, config, self.clock, self.rng, self.scheduler.failpoints,
            space=name, router=router,
        )
        self.lanes.register(MESSAGES, self.messages.run_lane,
                            dispatch_timeout_ms=MESSAGES_DISPATCH_TIMEOUT_MS)
        self.retention = Retention(storage, gate, self.scheduler.due_queue, self.clock, config,
                                   self.scheduler.failpoints)
        self.lanes.register(RETENTION, self.retention.run_lane,
                            dispatch_timeout_ms=RETENTION_DISPATCH_TIMEOUT_MS)
        for lane in app.lanes:
            self.lanes.register(lane.id, handler_for(lane, storage, self.env),
                                dispatch_timeout_ms=lane.dispatch_timeout_ms, phase=lane.phase)
        self.schedules = ScheduleRunner(
            storage, app.schedules, due_queue=self.scheduler.due_queue,
            alarm=self.scheduler.alarm, clock=self.clock, ledger=self.runtime.ledger,
            agents=app.agents, failpoints=self.scheduler.failpoints, host_lanes=app.lanes.ids,
            env=self.env,
        )
        for declared in app.schedules:
            # Each schedule runs as the concurrent host lane of its own id.
            self.lanes.register(declared.id, self.schedules.handler_for(declared),
                                dispatch_timeout_ms=declared.dispatch_timeout_ms)
        # A fact appended outside a pass with no native work (a delayed submission aborted
        # before it fell due, say) makes the publication lane due, for the pass to deliver it.
        gate.publication_drained = bool(len(app.subscribers))
        self.publication = Publication(
            storage, self.clock, config, self.rng, app.subscribers, self.scheduler.due_queue,
            self.scheduler.failpoints, space=name or "", env=env, http=http,
            open_work=lambda thread_id: [
                item.submission_id for item in self.runtime.ledger.thread_open(thread_id)],
        )
        self.maintenance = Maintenance(MaintenanceParts(
            storage=storage, clock=self.clock, config=config, rng=self.rng,
            scheduler=self.scheduler, runtime=self.runtime, lanes=self.lanes,
            faults=self.faults, bindings=self.bindings, publication=self.publication,
            pause=pause if pause is not None else no_pause,
        ))
        self.api = ApiContext(
            storage=storage,
            ledger=self.runtime.ledger,
            agents=app.agents,
            config=config,
            clock=self.clock,
            due_queue=self.scheduler.due_queue,
            wake=self.scheduler.alarm.schedule_now,
            schema_version=lambda: self.schema_version,
            maintenance=MaintenanceReadout(
                self.faults, self.bindings, self.maintenance.reports,
                schedules=self.schedules, host_lanes=app.lanes,
                due_queue=self.scheduler.due_queue, publication=self.publication,
            ),
            changes=self.scheduler.gate,
            live=self.runtime.live,
            operators=SubscriberOperations(
                storage, gate, self.clock, self.publication, self.scheduler.due_queue),
        )

    async def start(self) -> None:
        """Before any event: bring the schema up to date, learn the alarm slot, start the
        declared schedules and drop the host lanes a deploy removed (a row each, read only
        when the declarations changed since the last start), adopt this deployment's agent
        registry and make sure owed work has an alarm (O(1) rows otherwise)."""
        migrate(self.storage)
        self.schema_version = schema_version(self.storage)
        await self.storage.get_alarm()
        stored = generation.read_state(self.storage)
        self._settle_name(stored.space_name)
        key = lanes_key(self.app.schedules, self.app.lanes.ids)
        if len(self.app.subscribers):
            key = digest(key, subscribers_key(self.app.subscribers))
        if stored.lanes_key != key:
            # A deploy added, changed or removed a schedule or a host lane (or this is the
            # first start): their rows are read once. Otherwise nothing of them is read, so
            # an unchanged object starts in the same rows with one schedule or a hundred.
            # Schedules start (and those a deploy removed are dropped, lane and all) first,
            # so their lanes are never mistaken for host lanes without a handler.
            self.schedules.start()
            # Host lanes a deploy removed would otherwise be claimed and parked forever.
            self.lanes.drop_removed()
            # New subscribers get their cursors, removed ones lose theirs (logged).
            self.publication.reconcile()
            # Recorded last: a start lost before it does both again (each is idempotent).
            self.storage.transaction(lambda: generation.set_lanes_key(self.storage, key))
        if len(self.app.subscribers):
            # Every start: the environment (a secret, a binding) may have changed with no
            # declaration changing. Only parked rows are read (none, usually).
            self.publication.resume()
        # With retention on, its lane is always enrolled (a row read; written once).
        self.retention.start()
        self.maintenance.start(stored)

    def _settle_name(self, stored: str | None) -> None:
        """At start: adopt the stored name, or store the one this incarnation was given (a
        row written once in the object's life, never by a start that finds it stored)."""
        if stored is None:
            given = self.name
            if given is not None:
                self.storage.transaction(lambda: generation.set_space_name(self.storage, given))
                self._name_stored = True
            return
        if self.name is not None and self.name != stored:
            self._conflict(stored, self.name)
        self._name_stored = True
        self._use_name(stored)

    def _use_name(self, name: str) -> None:
        self.name = name
        self.messages.space = name
        self.publication.space = name

    def _conflict(self, kept: str, other: str) -> None:
        # Impossible with one object per name; should it happen, the name the object's log
        # was published under stays.
        if not self._name_conflict_logged:
            self._name_conflict_logged = True
            _log.warning("threadline: this object serves space %r but was named %r; keeping %r",
                         kept, other, kept)

    def _learn_name_from(self, request: Request, status: int | None) -> None:
        """Before (``status`` None) and after a request, while no name is stored: its
        ``{space}`` names this incarnation if nothing did, and once a request that may write
        succeeded the name is stored (a read never writes)."""
        named = route_space(request)
        if named is None:
            return
        if self.name is None:
            self._use_name(named)
        elif named != self.name:
            self._conflict(self.name, named)
        if status is None or status >= 400 or request.method in _READS:
            return
        known = self.name if self.name is not None else named
        self.storage.transaction(lambda: generation.set_space_name(self.storage, known))
        self._name_stored = True

    def wake_lane(
        self, lane_id: str, at: datetime | None = None, *, cursor: int | None = None
    ) -> None:
        """Make the host lane ``lane_id`` due at ``at`` (an aware datetime; now when None).

        For the Worker's own code (a webhook received, a queue message consumed): the
        enrollment and the alarm commit together, so the wave happens even if the object is
        lost right after. Waking a lane never moves it earlier than its retry floor (a lane
        backing off after a failure keeps its backoff), unless ``cursor`` names a newer source
        fact than any before it: a sequence number of the host's (>= 0, strictly greater than
        the last one given) is progress, which also refills the lane's retry budget and ends
        a parking; an equal or older cursor is a repeated notice and only enrolls. Raises
        :class:`~threadline.SchedulingError` for a lane this deployment does not declare, a
        naive datetime, or a cursor that is not an int >= 0.
        """
        if lane_id not in self.app.lanes:
            raise SchedulingError(f"no host lane {lane_id!r} is declared in this deployment")
        if cursor is not None and (
                isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0):
            raise SchedulingError(f"a lane cursor is an int >= 0, got {cursor!r}")
        due = self.clock.now_ms() if at is None else epoch_ms(at, what="the wake time")
        self.scheduler.gate.schedule(lane_id, due, cursor)

    def admit_message(
        self, message_id: str, to_thread: str, agent: str | None, input_json: str,
        *, hops: int = 1, from_space: str | None = None, from_thread: str | None = None,
    ) -> Verdict:
        """Admit a message another space's object sent (see :mod:`threadline.threads.routing`).

        Idempotent by ``message_id``: the same message delivered again answers with the
        submission it became the first time. The submission, its native work and the alarm
        commit together, then a prompt pass is asked for; it keeps the message's ``hops``, and
        one past ``max_message_hops`` is refused (``MessageLoop``). ``from_space`` and
        ``from_thread`` are where the sending object says it sent it from: the submission
        keeps them, and a space outside ``message_senders`` is refused. Returns
        :class:`~threadline.threads.routing.Refused` for a message refused for good; raises for a
        storage failure (the sender retries).
        """
        verdict = message_rows.admit_inbound(
            self.storage, self.scheduler.gate, self.app.agents, self.app.config,
            self.clock.now_ms, message_id=message_id, to_thread=to_thread, agent=agent,
            input_json=input_json, hops=hops, from_space=from_space, from_thread=from_thread,
        )
        if isinstance(verdict, Accepted):
            self.scheduler.alarm.schedule_now()
        return verdict

    async def handle(self, request: Request) -> Response:
        """Answer one HTTP request addressed to this space."""
        if self._name_stored:
            return await route(self.api, request)
        self._learn_name_from(request, None)
        response = await route(self.api, request)
        self._learn_name_from(request, response.status)
        return response

    async def alarm(self, retry_count: int = 0) -> PassReport:
        """Run one maintenance pass for a fired alarm (the platform has emptied the slot).

        A failing pass re-arms itself with a durable backoff and returns normally, so the
        platform's own retries (``retry_count``) are never needed.
        """
        await self.storage.get_alarm()
        return await self.maintenance.run_pass()


__all__ = ["Space"]


def _fetch_port(http: HttpPort | None) -> FetchPort | None:
    """The port agents' ``turn.http`` uses: the object's outbound port when it can make any
    request (workerd's fetch, httpx), httpx under CPython when none was given, else none (a
    test's POST-only fake: ``turn.http`` then says so)."""
    if http is None:
        return HttpxPort()
    return http if isinstance(http, FetchPort) else None
