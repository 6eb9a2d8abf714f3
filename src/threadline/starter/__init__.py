"""The starter: a new Worker project built on threadline, written by ``python -m threadline new``.

The project keeps its agents in ``src/app.py`` (importable by pytest, no platform import) and
only the two platform classes in ``src/entry.py``; it has a ``wrangler.toml`` binding the
Durable Object, a ``pyproject.toml`` depending on threadline, a ``SimulatedObject`` test, a
``.dev.vars.example`` and its own README. The files are the package data under
``template/``; names given there without their leading dot (``gitignore``) get it back, and
those ending in ``.tmpl`` (the Python files, which are no modules of this package, and the
``pyproject.toml``, which no tool should take for this package's) lose that ending.
"""

from __future__ import annotations

import re
import shutil
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from threadline import __version__

#: A project name: what ``wrangler.toml`` and ``pyproject.toml`` accept alike.
NAME_PATTERN = r"[a-z][a-z0-9-]{0,62}"
_NAME = re.compile(NAME_PATTERN)
#: Template files whose names gain a leading dot when written (package data keeps no dotfiles).
_DOTTED = {"gitignore", "dev.vars.example"}
_WHEEL = re.compile(r"threadline-[^-]+-py3-none-any\.whl")


class StarterError(Exception):
    """The starter cannot be written as asked (a bad name, or a directory in the way)."""


def project_name(directory: Path) -> str:
    """The project name a directory suggests: its name, lower-case, other characters as ``-``."""
    name = re.sub(r"[^a-z0-9-]+", "-", directory.name.lower()).strip("-")
    return name if _NAME.fullmatch(name) else "threadline-app"


def create(
    directory: Path, name: str | None = None, *, wheel: Path | None = None
) -> list[Path]:
    """Write the starter into ``directory`` (created; it must be missing or empty) and return
    the files written, relative to it.

    With ``wheel`` (a threadline wheel file), the project depends on a copy of it kept in
    ``wheels/`` (``[tool.uv.sources]``, which ``uv`` and ``pywrangler`` read) instead of on
    threadline from the package index. Raises :class:`StarterError`, having written nothing,
    for a name that does not match :data:`NAME_PATTERN`, a directory that holds anything, a
    wheel that is not a threadline wheel file, or a write the file system refuses (what was
    written by then is removed).
    """
    chosen = project_name(directory) if name is None else name
    if _NAME.fullmatch(chosen) is None:
        raise StarterError(f"project name {chosen!r} must match {NAME_PATTERN} "
                           "(lower-case letters, digits and -, starting with a letter)")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise StarterError(f"{directory} exists and is not an empty directory")
    if wheel is not None and not (wheel.is_file() and _WHEEL.fullmatch(wheel.name)):
        raise StarterError(f"{wheel} is not a threadline wheel file (threadline-*.whl)")
    files = list(_walk(resources.files(__name__).joinpath("template"), Path()))
    values = {"name": chosen, "version": __version__, "sources": "",
              "pip_threadline": "threadline"}
    if wheel is not None:
        kept = f"wheels/{wheel.name}"
        values["sources"] = f'[tool.uv.sources]\nthreadline = {{ path = "{kept}" }}\n\n'
        values["pip_threadline"] = kept
    # What to remove should a write fail: the outermost folder this call creates, or (the
    # directory being there, empty) what it writes inside it.
    created = next((folder for folder in reversed([directory, *directory.parents])
                    if not folder.exists()), None)
    written: list[Path] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if wheel is not None:
            (directory / "wheels").mkdir()
            shutil.copyfile(wheel, directory / "wheels" / wheel.name)
            written.append(Path("wheels") / wheel.name)
        for source, relative in files:
            text = source.read_text(encoding="utf-8")
            for key, value in values.items():
                text = text.replace("{{" + key + "}}", value)
            target = directory / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written.append(relative)
    except OSError as exc:
        _undo(directory, created)
        raise StarterError(f"could not write {directory}: {exc.strerror or exc}") from exc
    return sorted(written)


def _undo(directory: Path, created: Path | None) -> None:
    """Remove what a failed :func:`create` wrote (the directory was missing or empty)."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
        return
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _walk(folder: Traversable, relative: Path) -> list[tuple[Traversable, Path]]:
    found: list[tuple[Traversable, Path]] = []
    for entry in folder.iterdir():
        if entry.name == "__pycache__":
            continue
        name = f".{entry.name}" if entry.name in _DOTTED else entry.name.removesuffix(".tmpl")
        if entry.is_dir():
            found.extend(_walk(entry, relative / name))
        else:
            found.append((entry, relative / name))
    return found


__all__ = ["NAME_PATTERN", "StarterError", "create", "project_name"]
