"""``Application``: what a deployment registers: its configuration, agents and lanes."""

from __future__ import annotations

from threadline.config import RuntimeConfig


class Application:
    """The registry a Worker builds once at import time and hands to its object classes."""

    def __init__(self, config: RuntimeConfig | None = None) -> None:
        self.config = config if config is not None else RuntimeConfig()


__all__ = ["Application"]
