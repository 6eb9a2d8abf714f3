"""The local runtime: a Worker project served in real workerd, offline.

``python -m threadline dev`` builds the project's bundle (:mod:`threadline.devserver.bundle`:
the npm Pyodide build, the Pyodide-platform wheels, the project's ``src/`` and threadline) and
serves it with miniflare (``serve.mjs``), with live alarms and SQLite-backed Durable Objects,
vars and secrets from ``.dev.vars``. The Node.js side (``miniflare``, ``pyodide``) is the
project's own, from its ``package.json``. Nothing here is imported by ``import threadline``
or bundled into a Worker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from threadline.devserver.bundle import HERE, BundleError, Project, build

#: The npm packages the local runtime needs in the project's ``node_modules``.
NODE_PACKAGES = ("miniflare", "pyodide")


def node_ready(root: Path) -> bool:
    """Whether ``root/node_modules`` holds every package of :data:`NODE_PACKAGES`."""
    return all((root / "node_modules" / name / "package.json").is_file()
               for name in NODE_PACKAGES)


def install_node(root: Path) -> None:
    """Install the project's npm packages (``npm ci`` with a lock file, else ``npm install``)
    when :func:`node_ready` says some are missing."""
    if node_ready(root):
        return
    if shutil.which("npm") is None:
        raise BundleError("npm not found: the local runtime needs Node.js 20+")
    if not (root / "package.json").is_file():
        raise BundleError(f"{root / 'package.json'} is missing: it names the local runtime's "
                          f"npm packages ({', '.join(NODE_PACKAGES)}); `threadline new` "
                          "writes one")
    command = "ci" if (root / "package-lock.json").is_file() else "install"
    print(f"[dev] npm {command} (miniflare, pyodide) ...", flush=True)
    argv = ["npm", command, "--no-audit", "--no-fund", "--loglevel=error"]
    subprocess.run(argv, cwd=root, check=True)  # noqa: S603 - fixed argv, npm from PATH
    if not node_ready(root):
        raise BundleError(f"{root / 'package.json'} does not bring {', '.join(NODE_PACKAGES)}")


def serve_command(
    root: Path, *, host: str, port: int, persist: Path | None, vars_file: Path,
    exit_on_stdin_close: bool = False,
) -> list[str]:
    """Build the bundle of the project at ``root`` and return the command serving it
    (``persist`` None: in memory). ``serve.mjs`` is copied into the project first, so that
    Node.js finds miniflare in the project's own ``node_modules``."""
    if shutil.which("node") is None:
        raise BundleError("node not found: the local runtime needs Node.js 20+")
    install_node(root)
    state = root / ".threadline"
    bundle = build(Project(root), state / "bundle")
    script = state / "serve.mjs"
    shutil.copyfile(HERE / "serve.mjs", script)
    command = ["node", str(script), "--bundle", str(bundle), "--host", host,
               "--port", str(port), "--vars-file", str(vars_file)]
    command += ["--memory"] if persist is None else ["--persist", str(persist)]
    if exit_on_stdin_close:
        command.append("--exit-on-stdin-close")
    return command


def run(root: Path, *, host: str, port: int, persist: Path | None, vars_file: Path,
        exit_on_stdin_close: bool = False) -> None:
    """Serve the project at ``root`` until stopped (this process becomes Node.js)."""
    command = serve_command(root, host=host, port=port, persist=persist, vars_file=vars_file,
                            exit_on_stdin_close=exit_on_stdin_close)
    os.execvp(command[0], command)  # noqa: S606 - fixed argv, no shell


__all__ = ["NODE_PACKAGES", "BundleError", "install_node", "node_ready", "run",
           "serve_command"]
