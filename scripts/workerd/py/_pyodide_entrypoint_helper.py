"""Stand-in for workerd's internal ``_pyodide_entrypoint_helper`` module.

The ``workers`` SDK (PyPI ``workers-runtime-sdk``) imports it. The boot module sets
``cloudflareWorkersModule`` to the real ``cloudflare:workers`` module after start-up, so
``from workers import env`` and ``import_from_javascript("cloudflare:workers")`` work.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

cloudflareWorkersModule: Any = None
cloudflareSocketsModule: Any = None
python_workflows_implicit_dependencies = False
python_request_headers_preserve_commas = False


def patchWaitUntil(ctx: Any) -> None:
    """workerd binds ``ctx.waitUntil`` here; the local runtime leaves ctx as it is."""


def doAnImport(module_name: str) -> Any:
    raise ImportError(f"the local workerd runtime cannot import JavaScript module {module_name!r}")


@contextmanager
def patch_env_helper(kwds: Any) -> Iterator[None]:
    yield
