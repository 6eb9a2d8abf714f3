"""``python -m threadline``: the command line (``new DIR`` writes a starter project, ``dev``
serves one locally in real workerd)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from threadline import __version__
from threadline.starter import NAME_PATTERN, StarterError, create


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="threadline", description="Durable agent threads for Cloudflare Python Workers.")
    parser.add_argument("--version", action="version", version=f"threadline {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser(
        "new", help="write a new Worker project built on threadline",
        description="Write a Worker project: wrangler.toml, pyproject.toml, src/app.py with "
                    "one agent, src/entry.py, a test, .dev.vars.example and a README.")
    new.add_argument("directory", type=Path, help="where to write it (missing or empty)")
    new.add_argument("--name", help=f"the project's name ({NAME_PATTERN}; default: the "
                                    "directory's name)")
    new.add_argument("--wheel", type=Path,
                     help="depend on this threadline wheel (copied into wheels/) instead of "
                          "threadline from the package index")
    dev = commands.add_parser(
        "dev", help="serve a Worker project locally in real workerd (offline)",
        description="Build the project's bundle and serve it in real workerd with live "
                    "alarms: vars and secrets from .dev.vars, storage under "
                    ".threadline/state unless told otherwise. Ctrl-C stops it.")
    dev.add_argument("--project", type=Path, default=Path.cwd(),
                     help="the project (default: the current directory)")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8787, help="0 picks a free one")
    kept = dev.add_mutually_exclusive_group()
    kept.add_argument("--persist", type=Path, help="storage folder (default .threadline/state)")
    kept.add_argument("--memory", action="store_true", help="keep no storage")
    dev.add_argument("--vars-file", type=Path, help="default: PROJECT/.dev.vars")
    dev.add_argument("--exit-on-stdin-close", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "dev":
        return _dev(args)
    try:
        written = create(args.directory, args.name, wheel=args.wheel)
    except StarterError as exc:
        print(f"threadline new: {exc}", file=sys.stderr)
        return 2
    for relative in written:
        print(f"  wrote {args.directory / relative}")
    print(f"\nNext: cd {args.directory}, then see its README.md (uv run pytest)")
    return 0


def _dev(args: argparse.Namespace) -> int:
    from threadline.devserver import BundleError, run

    root = args.project.resolve()
    persist = None if args.memory else (args.persist or root / ".threadline" / "state")
    try:
        run(root, host=args.host, port=args.port, persist=persist,
            vars_file=args.vars_file or root / ".dev.vars",
            exit_on_stdin_close=args.exit_on_stdin_close)
    except BundleError as exc:
        print(f"threadline dev: {exc}", file=sys.stderr)
        return 2
    return 0  # not reached: run() becomes Node.js


if __name__ == "__main__":
    sys.exit(main())
