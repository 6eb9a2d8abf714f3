"""``Application``: what a deployment registers: its configuration, agents and lanes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from threadline.config import RuntimeConfig
from threadline.maintenance.host_lanes import DEFAULT_DISPATCH_TIMEOUT, HostLanes, LaneFn
from threadline.threads.agents import AgentFn, AgentRegistry, binding_registry_key

if TYPE_CHECKING:
    from threadline.maintenance.faults import RecoveryEventHook

F = TypeVar("F", bound=LaneFn)


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

    def agent(self, name: str, *, version: str = "1") -> Callable[[AgentFn], AgentFn]:
        """Decorator registering an async ``fn(turn)`` as the agent ``name`` at ``version``."""

        def register(fn: AgentFn) -> AgentFn:
            self.agents.register(name, fn, version=version)
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

        def register(fn: F) -> F:
            self.lanes.add(lane_id, fn, phase=phase, dispatch_timeout=dispatch_timeout)
            return fn

        return register

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


__all__ = ["Application"]
