"""``Application``: what a deployment registers: its configuration, agents and lanes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from threadline.config import RuntimeConfig
from threadline.threads.agents import AgentFn, AgentRegistry, binding_registry_key

if TYPE_CHECKING:
    from threadline.maintenance.faults import RecoveryEventHook


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

    def agent(self, name: str, *, version: str = "1") -> Callable[[AgentFn], AgentFn]:
        """Decorator registering an async ``fn(turn)`` as the agent ``name`` at ``version``."""

        def register(fn: AgentFn) -> AgentFn:
            self.agents.register(name, fn, version=version)
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
