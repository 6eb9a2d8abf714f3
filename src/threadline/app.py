"""``Application``: what a deployment registers: its configuration, agents, lanes and schedules."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from threadline.access import Authorizer
from threadline.config import RuntimeConfig
from threadline.delivery.queues import MAX_QUEUE_BATCH, queue_spec
from threadline.delivery.subscribers import (
    DEFAULT_BATCH_BYTES,
    DeliveryContext,
    Start,
    Subscribers,
    SubscriberSpec,
    kinds_of,
)
from threadline.delivery.subscribers import (
    DEFAULT_DISPATCH_TIMEOUT as DEFAULT_DELIVERY_TIMEOUT,
)
from threadline.delivery.webhooks import webhook_spec
from threadline.errors import InvalidSchedule, SchedulingError
from threadline.maintenance.host_lanes import DEFAULT_DISPATCH_TIMEOUT, HostLanes, LaneFn
from threadline.maintenance.schedule_context import ScheduleFn
from threadline.maintenance.schedule_lanes import Schedules
from threadline.schedules import DEFAULT_TZ, CronSchedule, EverySchedule, Schedule
from threadline.threads.agents import AgentRegistry, Rate, binding_registry_key
from threadline.threads.records import SUBMISSION_SETTLED, Record
from threadline.threads.turn import AgentFn

if TYPE_CHECKING:
    from threadline.maintenance.faults import RecoveryEventHook

F = TypeVar("F", bound=LaneFn)
S = TypeVar("S", bound=ScheduleFn)
#: A subscriber function: ``async fn(batch: list[Record]) -> None``.
SubscriberFn = Callable[[list[Record]], Awaitable[None]]
B = TypeVar("B", bound=SubscriberFn)


class Application:
    """The registry a Worker builds once at import time and hands to its object classes.

    ::

        app = threadline.Application()

        @app.agent("support", version="2")
        async def support(turn: threadline.Turn) -> dict:
            ...
    """

    def __init__(self, config: RuntimeConfig | None = None) -> None:
        self.config = config if config is not None else RuntimeConfig()
        self.agents = AgentRegistry()
        self.recovery_event_hook: RecoveryEventHook | None = None
        #: The host lanes declared with :meth:`lane`.
        self.lanes = HostLanes()
        #: The schedules declared with :meth:`every` and :meth:`cron`.
        self.schedules = Schedules()
        #: The subscribers declared with :meth:`subscriber`, :meth:`webhook` and :meth:`queue`.
        self.subscribers = Subscribers()
        #: The hook registered with :meth:`authorize`, if any.
        self.authorizer: Authorizer | None = None

    def authorize(self, fn: Authorizer) -> Authorizer:
        """Decorator registering the Worker's access hook: ``async fn(request) -> Principal |
        None``.

        The Worker calls it for every request that carries neither a scoped token nor the API
        token, with an :class:`~threadline.AccessRequest` (method, route name, the capability
        the route needs, space, Thread, headers). It returns who the caller is and what they
        may do, or None to refuse (401). threadline then checks the route's capability, space
        and Thread against the principal (403 beyond them). A hook that raises answers 500
        without detail (the error is logged), never open access. ::

            @app.authorize
            async def authorize(request: threadline.AccessRequest) -> threadline.Principal | None:
                user = await session_user(request.headers.get("cookie"))
                if user is None:
                    return None
                return threadline.Principal(subject=user.id, space=user.space,
                                            capabilities={"read", "submit"})
        """
        if not inspect.iscoroutinefunction(fn):
            raise TypeError("the authorize hook must be an async function")
        if self.authorizer is not None:
            raise ValueError("an authorize hook is already registered")
        self.authorizer = fn
        return fn

    def agent(
        self, name: str, *, version: str = "1", join_followups: bool = False,
        input: type[BaseModel] | None = None, concurrency: int | None = None,
        rate: Rate | None = None,
    ) -> Callable[[AgentFn], AgentFn]:
        """Decorator registering an async ``fn(turn)`` as the agent ``name`` at ``version``.

        With ``join_followups=True`` the agent may call :meth:`~threadline.Turn.followups` to
        take the input submitted to its Thread while it runs: that input is joined into the
        running submission and settles with it, instead of running after it.

        ``input`` (a pydantic model class) is validated at every admission (over HTTP, by a
        schedule, a message or ``turn.submit``): input that does not fit is refused with 422
        naming each field, and nothing is written. The agent reads the parsed model as
        ``turn.input``; the OpenAPI document shows its JSON Schema.

        ``concurrency`` (1 to 256) and ``rate`` (a :class:`~threadline.Rate`) are for a
        provider that caps how many calls it takes at once or per minute: the maintenance pass
        runs at most ``concurrency`` of the agent's Attempts at once across the object's
        Threads, and starts at most ``rate.limit`` of them in any window of ``rate.per``. A
        Thread whose head waits for a permit stays queued, costs no alarm and no read, and
        starts when a permit frees (FIFO holds on its Thread). ::

            @app.agent("chat", concurrency=8, rate=threadline.Rate(60, per=timedelta(minutes=1)))
            async def chat(turn: threadline.Turn) -> dict:
                ...
        """

        def register(fn: AgentFn) -> AgentFn:
            self.agents.register(name, fn, version=version, join_followups=join_followups,
                                 input_model=input, concurrency=concurrency, rate=rate)
            return fn

        return register

    def lane(
        self,
        lane_id: str,
        *,
        phase: str = "concurrent",
        dispatch_timeout: timedelta = DEFAULT_DISPATCH_TIMEOUT,
    ) -> Callable[[F], F]:
        """Decorator declaring a host lane: ``fn(ctx: LaneContext) -> datetime | None``.

        The lane runs one wave of ``fn`` (sync or async) whenever it is due, bounded by
        ``dispatch_timeout`` (a ``timedelta`` from 1 ms to 300 s); ``fn`` returns when the lane
        is next due (an aware ``datetime``) or None to go idle until a producer wakes it
        (:meth:`Turn.wake_lane` from an agent, :meth:`Space.wake_lane` from the Worker).
        ``phase="concurrent"`` runs it beside native work; ``"after-native"`` once every
        native Attempt of the pass has joined, ``after_native_concurrency`` lanes at a time.
        A wave that raises, returns a naive datetime, or outruns its allowance (cancelled,
        then abandoned after ``cancel_grace_ms``) is charged and backed off on its own;
        it never fails the pass. Delivery is at least once. ::

            @app.lane("digest", phase="after-native", dispatch_timeout=timedelta(seconds=20))
            async def digest(ctx: threadline.LaneContext) -> datetime | None:
                ...
                return ctx.now + timedelta(hours=1)

        Raises :class:`~threadline.SchedulingError` at once, before ``fn`` is even given, for
        a malformed id, one under the reserved ``threadline:`` prefix, an id already
        declared, an unknown phase or an allowance out of bounds.
        """
        self.lanes.check(lane_id, phase=phase, dispatch_timeout=dispatch_timeout)
        self._refuse_schedule_id(lane_id)

        def register(fn: F) -> F:
            self._refuse_schedule_id(lane_id)
            self.lanes.add(lane_id, fn, phase=phase, dispatch_timeout=dispatch_timeout)
            return fn

        return register

    def every(
        self,
        interval: timedelta,
        *,
        id: str,
        dispatch_timeout: timedelta = DEFAULT_DISPATCH_TIMEOUT,
    ) -> Callable[[S], S]:
        """Decorator declaring a schedule that fires every ``interval``: ``fn(ctx)``.

        ``fn`` (async or sync) gets a :class:`~threadline.ScheduleContext` for each fire:
        ``ctx.fire_time`` is the scheduled time, ``await ctx.submit(thread, input)`` admits
        into this space once per fire. The fires are the multiples of ``interval`` (1 s to
        366 days, whole milliseconds) since the Unix epoch, so every 5 minutes fires at
        :00, :05, ... UTC, whatever happened to the object. ::

            @app.every(timedelta(minutes=5), id="billing-sync")
            async def billing_sync(ctx: threadline.ScheduleContext) -> None:
                await ctx.submit("billing", {"as_of": ctx.fire_time.isoformat()})

        Fires missed while the object could not run coalesce into one run of the latest;
        runs never overlap; a run that raises is retried with backoff until the next fire
        supersedes it, and parks (reported once) after ``park_after_stalls`` failed runs in
        a row; each run is bounded by ``dispatch_timeout`` (1 ms to 300 s). ``fn`` runs at
        least once per fire (the object lost after it returned, before its completion
        committed, runs it again for the same fire): only the completion and
        ``ctx.submit`` are exactly once. Raises :class:`~threadline.InvalidSchedule` at
        once, before ``fn`` is even given, for a malformed or reserved id, an id a schedule
        or host lane already has, an interval or an allowance out of bounds.
        """
        return self._declare(lambda: EverySchedule(id, interval), dispatch_timeout)

    def cron(
        self,
        expression: str,
        *,
        id: str,
        tz: str = DEFAULT_TZ,
        dispatch_timeout: timedelta = DEFAULT_DISPATCH_TIMEOUT,
    ) -> Callable[[S], S]:
        """Decorator declaring a schedule that fires when the five-field cron ``expression``
        matches the wall clock of ``tz`` (an IANA name; UTC by default): ``fn(ctx)``. ::

            @app.cron("0 9 * * MON-FRI", tz="Europe/Paris", id="digest")
            async def digest(ctx: threadline.ScheduleContext) -> None:
                await ctx.submit("digest", {"day": ctx.fire_time.date().isoformat()})

        ``ctx.fire_time`` is in ``tz``. Across daylight-saving changes a job at a fixed time
        of day fires once a day (in the skipped hour: at the first minute after it; in the
        repeated hour: at its first occurrence); see :mod:`threadline.schedules`. Everything
        else is as for :meth:`every`; an invalid expression or an unknown time zone raises
        :class:`~threadline.InvalidSchedule` here, never when the schedule would fire.
        """
        return self._declare(lambda: CronSchedule(id, expression, tz), dispatch_timeout)

    def _declare(
        self, make: Callable[[], Schedule], dispatch_timeout: timedelta
    ) -> Callable[[S], S]:
        schedule = make()
        self._refuse_lane_id(schedule.id)
        self.schedules.check(schedule, dispatch_timeout=dispatch_timeout)

        def register(fn: S) -> S:
            self._refuse_lane_id(schedule.id)
            self.schedules.add(schedule, fn, dispatch_timeout=dispatch_timeout)
            return fn

        return register

    def _refuse_schedule_id(self, lane_id: str) -> None:
        # One namespace: a schedule runs as the host lane of its own id.
        if lane_id in self.schedules:
            raise SchedulingError(f"lane {lane_id!r}: a schedule already has that id")

    def _refuse_lane_id(self, schedule_id: str) -> None:
        if schedule_id in self.lanes:
            raise InvalidSchedule(f"schedule {schedule_id!r}: a host lane already has that id")

    def subscriber(
        self,
        name: str,
        *,
        kinds: Iterable[str] | None = None,
        start: Start = "beginning",
        version: int = 1,
        required: bool = False,
        batch: int = 100,
        dispatch_timeout: timedelta = DEFAULT_DELIVERY_TIMEOUT,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> Callable[[B], B]:
        """Decorator declaring a subscriber: ``async fn(batch: list[Record]) -> None``.

        ``fn`` gets the records of the space's Threads (those of ``kinds``; None: every
        kind) in batches of at most ``batch``, in log order within each Thread, at least once
        (deduplicate by ``record_id``), and of at most ``batch_bytes`` bytes of records as JSON
        (1 KiB to 8 MiB, default 1 MiB; a record larger than that comes alone): returning
        delivers the batch, raising
        :class:`~threadline.DeliveryRefused` parks the subscriber (shown in ``/maintenance``,
        logged once) until a deploy bumps ``version``, raising anything else retries the
        batch with backoff. Each call is bounded by ``dispatch_timeout`` (1 ms to 300 s).
        ``start="beginning"`` delivers the log from its start, in bounded waves beside native
        work; ``"now"`` only what is appended after its first start; a bumped ``version``
        delivers the log again from its start. ``required=True`` holds a Thread's next native
        work until the subscriber has consumed that Thread's records; such a subscriber fails
        and parks per Thread, going on with the other Threads' records meanwhile. ::

            @app.subscriber("crm-sync", kinds={"crm.contact"})
            async def crm_sync(batch: list[threadline.Record]) -> None:
                ...

        Raises :class:`~threadline.SchedulingError` at once for a malformed or repeated
        name, or an option out of bounds.
        """
        chosen = kinds_of(kinds)
        # Checked before fn is even given, so a bad declaration fails at import.
        SubscriberSpec(name, _never, chosen, start, version, required, batch, dispatch_timeout,
                       batch_bytes)
        if self.subscribers.get(name) is not None:
            raise SchedulingError(f"subscriber {name!r} is already declared")

        def register(fn: B) -> B:
            if not callable(fn):
                raise SchedulingError(f"subscriber {name!r}: the function must be callable")

            async def deliver(records: list[Record], ctx: DeliveryContext) -> None:
                result = fn(records)
                if inspect.isawaitable(result):
                    await result

            self.subscribers.add(SubscriberSpec(name, deliver, chosen, start, version,
                                                required, batch, dispatch_timeout,
                                                batch_bytes))
            return fn

        return register

    def on_settled(
        self,
        fn: B | None = None,
        *,
        name: str | None = None,
        start: Start = "beginning",
        version: int = 1,
        required: bool = False,
        batch: int = 100,
        dispatch_timeout: timedelta = DEFAULT_DELIVERY_TIMEOUT,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> Any:
        """A subscriber to ``submission.settled`` records: ``@app.on_settled`` (named after
        the function) or ``@app.on_settled(name=..., required=...)``; see :meth:`subscriber`."""

        def register(target: B) -> B:
            chosen = name if name is not None else target.__name__.lstrip("_")
            return self.subscriber(
                chosen, kinds={SUBMISSION_SETTLED}, start=start, version=version,
                required=required, batch=batch, dispatch_timeout=dispatch_timeout,
                batch_bytes=batch_bytes)(target)

        return register if fn is None else register(fn)

    def webhook(
        self,
        name: str,
        *,
        url: str,
        secret_env: str | Sequence[str],
        kinds: Iterable[str] | None = None,
        start: Start = "beginning",
        version: int = 1,
        required: bool = False,
        batch: int = 100,
        dispatch_timeout: timedelta = DEFAULT_DELIVERY_TIMEOUT,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> SubscriberSpec:
        """Declare a subscriber that POSTs each batch of records to ``url`` as signed JSON.

        ``secret_env`` names the Worker secret that signs the requests (read at each delivery;
        several names while rotating: the first must be set, each one set adds a ``v1``
        signature). ``url`` is https (plain http only to localhost or 127.0.0.1). ``kinds``
        and the other options are those of every subscriber. A 2xx delivers the batch; 408,
        429, a 5xx, a timeout or an unreachable host retry it with backoff; any other status
        parks the subscriber with the status and the start of the answer shown in
        ``/maintenance``. See :mod:`threadline.delivery.webhooks`. ::

            app.webhook("crm", url="https://crm.example.com/hooks/threadline",
                        secret_env="CRM_WEBHOOK_SECRET", kinds={"submission.settled"})

        Raises :class:`~threadline.SchedulingError` at once for a bad url, secret name or
        option, or a name already declared.
        """
        return self.subscribers.add(webhook_spec(
            name, url=url, secret_env=secret_env, kinds=kinds, start=start, version=version,
            required=required, batch=batch, dispatch_timeout=dispatch_timeout,
            batch_bytes=batch_bytes,
        ))

    def queue(
        self,
        name: str,
        *,
        binding: str = "EVENTS",
        kinds: Iterable[str] | None = None,
        start: Start = "beginning",
        version: int = 1,
        required: bool = False,
        batch: int = MAX_QUEUE_BATCH,
        dispatch_timeout: timedelta = DEFAULT_DELIVERY_TIMEOUT,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> SubscriberSpec:
        """Declare a subscriber that sends each record to the Cloudflare Queue bound as
        ``binding`` (one message per record, ``sendBatch`` per batch; ``batch`` at most 100).
        See :mod:`threadline.delivery.queues`. ::

            app.queue("audit", binding="EVENTS", kinds={"approval.requested"})

        Raises :class:`~threadline.SchedulingError` at once for a bad binding name or option,
        or a name already declared.
        """
        return self.subscribers.add(queue_spec(
            name, binding=binding, kinds=kinds, start=start, version=version,
            required=required, batch=batch, dispatch_timeout=dispatch_timeout,
            batch_bytes=batch_bytes,
        ))

    def on_recovery_event(self, fn: RecoveryEventHook) -> RecoveryEventHook:
        """Decorator registering the host hook for recovery events (one per application).

        ``fn(event)`` (sync or async) receives each :class:`~threadline.RecoveryEvent` in
        ``seq`` order through the ``threadline:recovery-events`` lane: a recovery fault
        ``created``, ``changed`` or ``cleared`` for an affected submission, or a head
        ``parked`` on an unregistered agent. Delivery is at least once: return only after the
        event is durably handled or queued on the host side, and deduplicate by the object
        and ``seq``. An event is acknowledged only after ``fn`` returns; if it raises, the
        lane retries it with backoff and later events wait behind it, while native work goes
        on. One wave of the lane lasts at most 30 s: a slow hook is cut there and resumes at
        the unacknowledged event soon after (a wave that acknowledged anything is never
        counted toward parking the lane), and a hook that ignores its cancellation is
        abandoned after ``cancel_grace_ms``, its event delivered again later. Without a hook,
        events are logged and acknowledged. ::

            @app.on_recovery_event
            async def notify(event: threadline.RecoveryEvent) -> None:
                ...
        """
        if not callable(fn):
            raise TypeError("the recovery-event hook must be callable")
        if self.recovery_event_hook is not None:
            raise ValueError("a recovery-event hook is already registered")
        self.recovery_event_hook = fn
        return fn

    @property
    def binding_registry_key(self) -> str:
        """Stable hash of the registered agent names and versions (changes only with them)."""
        return binding_registry_key(self.agents)


async def _never(records: list[Record], ctx: DeliveryContext) -> None:
    """Stands for the function while a declaration is checked; never called."""


__all__ = ["Application"]
