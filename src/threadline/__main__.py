"""``python -m threadline``: the command line (``threadline new DIR`` writes a starter project)."""

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
    args = parser.parse_args(argv)
    try:
        written = create(args.directory, args.name, wheel=args.wheel)
    except StarterError as exc:
        print(f"threadline new: {exc}", file=sys.stderr)
        return 2
    for relative in written:
        print(f"  wrote {args.directory / relative}")
    print(f"\nNext: cd {args.directory}, then see its README.md (uv run pytest)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
