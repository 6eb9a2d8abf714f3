"""Fixtures that run the Worker in real workerd (miniflare + the npm Pyodide build).

The runtime serves a test bundle: ``src/`` unchanged plus ``probe/probe_entry.py`` (a test-only
main module that re-exports the app's classes and adds a ``StorageProbe`` object). Each runtime
listens on a free port (port 0), persists to a temporary folder, and is stopped in ``finally``.
Readiness and every wait are bounded polls; nothing sleeps blindly.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from workerd_runtime import ROOT, SIGNING_KEYS, Runtime

PROBE = Path(__file__).resolve().parent / "probe"
BUNDLE = ROOT / ".threadline" / "bundle-test"


def _missing_node() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (ROOT / "node_modules" / "miniflare").is_dir():
        return "node_modules is missing (scripts/test runs npm ci)"
    return None


@pytest.fixture(scope="session")
def bundle() -> Path:
    """Build (or reuse) the test bundle."""
    missing = _missing_node()
    if missing:
        pytest.fail(f"the workerd tests need Node.js and npm packages: {missing}")
    command = [
        sys.executable,
        str(ROOT / "scripts" / "workerd" / "build.py"),
        "--out",
        str(BUNDLE),
        "--overlay",
        str(PROBE),
        "--main",
        "probe_entry",
        "--durable-object",
        "PROBE=StorageProbe",
        "--durable-object",
        "PROBE_THREADS=ProbeThreadObject",
        "--durable-object",
        "SCHEDULED_THREADS=ScheduledThreadObject",
        "--durable-object",
        "SUBSCRIBED_THREADS=SubscribedThreadObject",
        "--durable-object",
        "CAPPED_THREADS=CappedThreadObject",
        "--durable-object",
        "MEASURED_THREADS=MeasuredThreadObject",
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return BUNDLE


@pytest.fixture(scope="session")
def start_runtime(bundle: Path) -> Iterator[Callable[..., Runtime]]:
    """Start runtimes on demand; every one started is stopped at the end of the session."""
    started: list[Runtime] = []

    def start(persist: Path, **variables: str) -> Runtime:
        runtime = Runtime(bundle, persist, variables)
        started.append(runtime)
        runtime.start()
        return runtime

    try:
        yield start
    finally:
        for runtime in started:
            runtime.stop()


@pytest.fixture(scope="session")
def workerd(
    start_runtime: Callable[..., Runtime], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runtime]:
    """A warmed-up runtime shared by the tests that need no restart."""
    runtime = start_runtime(tmp_path_factory.mktemp("workerd-state"))
    try:
        runtime.warm()
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture(scope="session")
def signed(
    start_runtime: Callable[..., Runtime], tmp_path_factory: pytest.TempPathFactory
) -> Runtime:
    """A runtime whose Worker also accepts scoped tokens signed with ``SIGNING_KEYS``."""
    started = start_runtime(tmp_path_factory.mktemp("signed"),
                            THREADLINE_SIGNING_KEYS=SIGNING_KEYS)
    started.warm()
    return started
