"""Python half of the local runtime's glue: what workerd's Python entrypoint helper does.

The JavaScript classes exported to workerd (see ``boot.mjs``) construct the Python
entrypoint and Durable Object classes of the main module with the JavaScript ``ctx`` and
``env``, and call their handlers here. Arguments cross through ``python_from_rpc`` and
results through ``python_to_rpc``, as workerd converts them for Python handlers.
"""

import importlib
import inspect
from typing import Any

from workers import python_from_rpc, python_to_rpc

_main: Any = None


def load_main(module_name: str) -> None:
    """Import the Worker's main module (``src/entry.py`` -> ``entry``)."""
    global _main
    _main = importlib.import_module(module_name)


def construct(class_name: str, ctx: Any, env: Any) -> Any:
    cls = getattr(_main, class_name, None)
    if cls is None:
        raise TypeError(f"the main module defines no class {class_name!r}")
    return cls(ctx, env)


async def call(instance: Any, method: str, *args: Any) -> Any:
    handler = getattr(instance, method, None)
    if handler is None:
        raise TypeError(f"{type(instance).__name__} has no method {method!r}")
    result = handler(*(python_from_rpc(arg) for arg in args))
    if inspect.isawaitable(result):
        result = await result
    return python_to_rpc(result)
