"""Build the bundle the local runtime serves, for one project.

A project is a folder with a ``wrangler.toml`` whose ``main`` is a module directly in ``src/``
and a ``node_modules`` holding the npm ``pyodide`` and ``miniflare`` packages. The bundle is a
folder of workerd modules plus ``bundle.json`` (read by ``serve.mjs``):

- ``main.mjs``            generated: one exported class per Python entrypoint / Durable Object
- ``boot.mjs``            boots Pyodide inside workerd and bridges the handlers
- ``pyodide.*``, ``python_stdlib.zip``, ``pyodide-lock.json``   the npm Pyodide build
- ``site-packages.zip``   the pinned Pyodide-platform wheels of ``requirements.txt`` (what
                          threadline needs), the wheels of the project's own other
                          dependencies (its ``pyproject.toml``), and the stand-ins for
                          workerd-internal modules (``stubs/``)
- ``app.zip``             the project's ``src/`` plus overlays, and threadline itself when
                          ``src/`` does not hold it (the installed package, without this
                          folder and the starter, which the Worker never imports)

Bindings, the main module, vars and the compatibility date come from ``wrangler.toml``. A
build is skipped when nothing it reads has changed (a hash stored in the bundle).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
REQUIREMENTS = HERE / "requirements.txt"
PYODIDE_FILES = {
    "pyodide.mjs": "ESModule",
    "pyodide.asm.mjs": "ESModule",
    "pyodide.asm.wasm": "CompiledWasm",
    "python_stdlib.zip": "Data",
    "pyodide-lock.json": "Text",
}
PIP_PLATFORM = [
    "--only-binary=:all:", "--platform", "pyemscripten_2026_0_wasm32",
    "--python-version", "3.14", "--implementation", "cp", "--abi", "cp314",
]
ENTRYPOINT_CLASS = "Default"
STAMP = ".stamp"
#: Parts of the installed package the Worker never imports: left out of its bundle.
_NOT_BUNDLED = ("devserver", "starter")


class BundleError(Exception):
    """The project cannot be bundled (no wrangler.toml, a main outside src/, no Pyodide...)."""


def log(message: str) -> None:
    print(f"[bundle] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Project:
    """A Worker project as the local runtime reads it."""

    root: Path
    #: Extra source folders put beside ``src/`` (tests use them for probe entrypoints).
    overlays: tuple[Path, ...] = ()
    #: Durable Object bindings to add to the ones ``wrangler.toml`` declares.
    extra_objects: dict[str, str] = field(default_factory=dict)

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def pyodide(self) -> Path:
        return self.root / "node_modules" / "pyodide"

    def wrangler(self) -> dict[str, object]:
        path = self.root / "wrangler.toml"
        if not path.is_file():
            raise BundleError(f"{path} is missing: the local runtime serves a Worker project")
        with path.open("rb") as handle:
            return tomllib.load(handle)

    def dependencies(self) -> list[str]:
        """The project's declared dependencies that the pinned wheels do not provide: neither
        threadline nor one of its own (all of them for threadline's own checkout)."""
        path = self.root / "pyproject.toml"
        if not path.is_file():
            return []
        with path.open("rb") as handle:
            project = tomllib.load(handle).get("project", {})
        if project.get("name") == "threadline":
            return []
        provided = {"threadline", *(_distribution(spec) for spec in pinned())}
        return sorted(spec for spec in project.get("dependencies", [])
                      if _distribution(spec) not in provided)


def _distribution(spec: str) -> str:
    """The normalised distribution name a requirement names (``Pydantic_Core>=2`` ->
    ``pydantic-core``)."""
    name = re.split(r"[\s\[<>=!~;@(]", spec.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def source_files(folder: Path) -> list[Path]:
    """Files of a Python source tree, without caches and build leftovers."""
    return sorted(
        path for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
        and path.suffix not in {".pyc", ".pyo"}
        and not any(part.endswith(".egg-info") for part in path.parts)
    )


def _digest(paths: Iterable[Path], extra: str) -> str:
    hasher = hashlib.sha256(extra.encode())
    for path in paths:
        hasher.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return hasher.hexdigest()


def main_module_name(wrangler: dict[str, object]) -> str:
    main = str(wrangler.get("main", "src/entry.py"))
    path = Path(main)
    if path.suffix != ".py" or path.parent != Path("src"):
        raise BundleError(f"wrangler.toml main must be a module directly in src/, not {main!r}")
    return path.stem


def durable_objects(wrangler: dict[str, object], extra: dict[str, str]) -> dict[str, str]:
    section = wrangler.get("durable_objects", {})
    bindings = section.get("bindings", []) if isinstance(section, dict) else []
    return {**{str(b["name"]): str(b["class_name"]) for b in bindings}, **extra}


def fetch_wheels(cache_root: Path, requirements: Sequence[str], *, with_deps: bool) -> Path:
    """Download Pyodide-platform wheels for ``requirements`` once per distinct list."""
    key = hashlib.sha256("\n".join([str(with_deps), *requirements]).encode()).hexdigest()[:16]
    folder = cache_root / key
    if (folder / ".complete").exists():
        return folder
    if importlib.util.find_spec("pip") is None:
        raise BundleError("the local runtime downloads the Pyodide wheels with pip, which this "
                          "environment lacks: install it (with uv: `uv pip install pip`)")
    cache_root.mkdir(parents=True, exist_ok=True)
    download = Path(tempfile.mkdtemp(prefix=".download.", dir=cache_root))
    log(f"downloading Pyodide wheels (pip): {', '.join(requirements)} ...")
    started = time.monotonic()
    command = [sys.executable, "-m", "pip", "download", "--quiet",
               "--disable-pip-version-check", *([] if with_deps else ["--no-deps"]),
               *PIP_PLATFORM, "-d", str(download), *requirements]
    subprocess.run(command, check=True)  # noqa: S603 - fixed argv, no shell
    (download / ".complete").touch()
    shutil.rmtree(folder, ignore_errors=True)
    download.rename(folder)
    log(f"wheels ready in {time.monotonic() - started:.1f} s")
    return folder


def pinned() -> list[str]:
    """The pinned requirements of ``requirements.txt``."""
    lines = REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _write_site_packages(target: Path, wheel_dirs: Sequence[Path]) -> None:
    seen: set[str] = set()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for stub in sorted((HERE / "stubs").glob("*.py.tmpl")):
            name = stub.name.removesuffix(".tmpl")
            out.write(stub, name)
            seen.add(name)
        taken: set[str] = set()
        for wheel_dir in wheel_dirs:
            for wheel in sorted(wheel_dir.glob("*.whl")):
                project = _distribution(wheel.name.split("-", 1)[0])
                if project in taken:
                    continue  # pinned first: a project's own dependency never replaces one
                taken.add(project)
                with zipfile.ZipFile(wheel) as source:
                    for info in source.infolist():
                        # .pth hooks only load workerd-internal patches; the runtime has none.
                        if (info.is_dir() or info.filename.endswith(".pth")
                                or info.filename in seen):
                            continue
                        seen.add(info.filename)
                        out.writestr(info.filename, source.read(info))


def _app_roots(project: Project) -> list[tuple[Path, str]]:
    roots = [(project.src, ""), *((overlay, "") for overlay in project.overlays)]
    if not (project.src / "threadline").is_dir():
        roots.append((PACKAGE, "threadline/"))
    return roots


def _app_files(project: Project) -> list[tuple[Path, str]]:
    files: list[tuple[Path, str]] = []
    for root, prefix in _app_roots(project):
        for path in source_files(root):
            name = prefix + path.relative_to(root).as_posix()
            parts = name.split("/")
            if len(parts) > 2 and parts[0] == "threadline" and parts[1] in _NOT_BUNDLED:
                continue
            files.append((path, name))
    return files


def _write_main(target: Path, objects: dict[str, str], main: str) -> None:
    lines = [
        "// Generated by threadline's local runtime (threadline.devserver): do not edit.",
        'import { configure, makeDurableObject, makeEntrypoint } from "./boot.mjs";',
        "",
        f"configure({{ main: {json.dumps(main)} }});",
        f"export default makeEntrypoint({json.dumps(ENTRYPOINT_CLASS)});",
    ]
    for class_name in sorted(set(objects.values())):
        lines.append(f"export const {class_name} = makeDurableObject({json.dumps(class_name)});")
    target.write_text("\n".join(lines) + "\n")


def build(project: Project, out: Path, *, main: str | None = None, force: bool = False,
          wheels_cache: Path | None = None) -> Path:
    """Build (or find up to date) the bundle of ``project`` in ``out``; return ``out``."""
    out = out.resolve()
    if not (project.pyodide / "package.json").exists():
        raise BundleError(f"{project.pyodide} is missing: run `npm install` in {project.root} "
                          "(its package.json names pyodide and miniflare)")
    wrangler = project.wrangler()
    module = main or main_module_name(wrangler)
    if not project.overlays and not (project.src / f"{module}.py").is_file():
        raise BundleError(f"{project.src / (module + '.py')} is missing (wrangler.toml main)")
    objects = durable_objects(wrangler, project.extra_objects)
    extra = project.dependencies()
    app_files = _app_files(project)
    inputs = [REQUIREMENTS, Path(__file__).resolve(), HERE / "boot.mjs",
              *sorted((HERE / "stubs").glob("*.py.tmpl")), project.pyodide / "package.json",
              project.root / "wrangler.toml", *(path for path, _ in app_files)]
    stamp = _digest(inputs, json.dumps([module, objects, extra,
                                        [name for _, name in app_files]]))
    if not force and (out / STAMP).exists() and (out / STAMP).read_text() == stamp:
        log(f"up to date: {out}")
        return out
    started = time.monotonic()
    cache = wheels_cache if wheels_cache is not None else project.root / ".threadline" / "wheels"
    wheel_dirs = [fetch_wheels(cache, pinned(), with_deps=False)]
    if extra:
        wheel_dirs.append(fetch_wheels(cache, extra, with_deps=True))
    log(f"building {out} ...")
    out.parent.mkdir(parents=True, exist_ok=True)
    # A private staging folder, swapped in at the end: concurrent builds never see half a bundle.
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    modules: list[dict[str, str]] = [{"type": "ESModule", "path": "main.mjs"},
                                     {"type": "ESModule", "path": "boot.mjs"}]
    for name, kind in PYODIDE_FILES.items():
        shutil.copyfile(project.pyodide / name, staging / name)
        modules.append({"type": kind, "path": name})
    shutil.copyfile(HERE / "boot.mjs", staging / "boot.mjs")
    _write_main(staging / "main.mjs", objects, module)
    _write_site_packages(staging / "site-packages.zip", wheel_dirs)
    with zipfile.ZipFile(staging / "app.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for path, name in app_files:
            zf.write(path, name)
    modules += [{"type": "Data", "path": "site-packages.zip"},
                {"type": "Data", "path": "app.zip"}]
    vars_section = wrangler.get("vars", {})
    manifest = {
        "name": wrangler.get("name", "threadline"),
        "main": module,
        "compatibilityDate": str(wrangler.get("compatibility_date", "2025-09-01")),
        "modules": modules,
        "durableObjects": objects,
        "vars": vars_section if isinstance(vars_section, dict) else {},
    }
    (staging / "bundle.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (staging / STAMP).write_text(stamp)
    retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
    if out.exists():
        out.rename(retired / "bundle")
    staging.rename(out)
    shutil.rmtree(retired, ignore_errors=True)
    log(f"built in {time.monotonic() - started:.1f} s")
    return out


def main(argv: Sequence[str] | None = None, *, default_root: Path | None = None) -> int:
    """``python -m threadline.devserver.bundle``: build a project's bundle, print its path."""
    parser = argparse.ArgumentParser(description="Build the local runtime's bundle.")
    parser.add_argument("--project", type=Path, default=default_root or Path.cwd())
    parser.add_argument("--out", type=Path, help="default: PROJECT/.threadline/bundle")
    parser.add_argument("--overlay", action="append", default=[], type=Path,
                        help="extra source folder")
    parser.add_argument("--main", help="main module (default: from wrangler.toml)")
    parser.add_argument("--durable-object", action="append", default=[], metavar="BINDING=Class")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--wheels-only", action="store_true", help="only fetch the wheels")
    args = parser.parse_args(argv)
    root = args.project.resolve()
    extra: dict[str, str] = {}
    for item in args.durable_object:
        binding, _, class_name = item.partition("=")
        if not binding or not class_name:
            parser.error(f"--durable-object wants BINDING=Class, not {item!r}")
        extra[binding] = class_name
    project = Project(root, tuple(path.resolve() for path in args.overlay), extra)
    try:
        if args.wheels_only:
            print(fetch_wheels(root / ".threadline" / "wheels", pinned(), with_deps=False))
        else:
            out = args.out if args.out is not None else root / ".threadline" / "bundle"
            print(build(project, out, main=args.main, force=args.force))
    except BundleError as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
