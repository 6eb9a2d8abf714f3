"""The Worker's environment (secrets and bindings) as user code sees it: read-only.

Agents (``turn.env``), host lanes and schedules (``ctx.env``) read the environment the object
was started with: in workerd the Worker's ``env``, under CPython whatever the test or host
passed (a mapping or an object with attributes). User code reads it and never changes it: a
secret written by one agent would leak into every other Thread of the object, and could not
survive the next incarnation anyway.

A name the environment does not hold raises an error naming it, never any value: a message
that echoed the environment could print a secret into a log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn


class Environment:
    """A read-only view of the Worker's environment.

    ``env.NAME`` and ``env["NAME"]`` read a secret or binding (``AttributeError`` /
    ``KeyError`` naming it when it is not set); ``env.get("NAME", default)`` and
    ``"NAME" in env`` ask without raising. Nothing can be set or deleted through it.
    """

    __slots__ = ("_source",)

    def __init__(self, source: Any = None) -> None:
        object.__setattr__(self, "_source", source)

    def get(self, name: str, default: Any = None) -> Any:
        """The value set as ``name``, or ``default`` when there is none."""
        source = self._source
        if source is None or not isinstance(name, str) or name.startswith("_"):
            return default
        value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
        return default if value is None else value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> Any:
        value = self.get(name)
        if value is None:
            raise KeyError(f"the environment has no {name!r}")
        return value

    def __getattr__(self, name: str) -> Any:
        value = self.get(name)
        if value is None:
            raise AttributeError(f"the environment has no {name!r} (set it as a secret, a"
                                 " var or a binding of the Worker)")
        return value

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise TypeError("the environment is read-only")

    def __delattr__(self, name: str) -> NoReturn:
        raise TypeError("the environment is read-only")

    def __setitem__(self, name: str, value: object) -> NoReturn:
        raise TypeError("the environment is read-only")

    def __delitem__(self, name: str) -> NoReturn:
        raise TypeError("the environment is read-only")

    def __repr__(self) -> str:
        # Never the values: a repr lands in logs and tracebacks.
        return "<Environment (read-only)>"


__all__ = ["Environment"]
