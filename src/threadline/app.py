"""``Application``: what a deployment registers: its configuration, agents and lanes."""

from __future__ import annotations

from collections.abc import Callable

from threadline.config import RuntimeConfig
from threadline.threads.agents import AgentFn, AgentRegistry, binding_registry_key


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

    def agent(self, name: str, *, version: str = "1") -> Callable[[AgentFn], AgentFn]:
        """Decorator registering an async ``fn(turn)`` as the agent ``name`` at ``version``."""

        def register(fn: AgentFn) -> AgentFn:
            self.agents.register(name, fn, version=version)
            return fn

        return register

    @property
    def binding_registry_key(self) -> str:
        """Stable hash of the registered agent names and versions (changes only with them)."""
        return binding_registry_key(self.agents)


__all__ = ["Application"]
