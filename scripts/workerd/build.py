"""Build the bundle that the local workerd runtime serves.

The bundle is a folder of workerd modules plus ``bundle.json`` (read by ``serve.mjs``):

- ``main.mjs``            generated: one exported class per Python entrypoint / Durable Object
- ``boot.mjs``            boots Pyodide inside workerd and bridges the handlers
- ``pyodide.*``, ``python_stdlib.zip``, ``pyodide-lock.json``   the npm Pyodide build
- ``site-packages.zip``   the pinned wheels of ``requirements.txt`` (Pyodide platform) and
                          the two stand-ins for workerd-internal modules (``py/``)
- ``app.zip``             ``src/`` (the Worker: ``entry.py`` and ``threadline``) plus overlays

Bindings, the main module and the compatibility date come from ``wrangler.toml``.
A build is skipped when nothing it reads has changed (a hash stored in the bundle).

Usage: python scripts/workerd/build.py [--out DIR] [--overlay DIR] [--main MODULE]
                                       [--durable-object BINDING=Class] [--force]
       python scripts/workerd/build.py --wheels-only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REQUIREMENTS = HERE / "requirements.txt"
PYODIDE_DIR = ROOT / "node_modules" / "pyodide"
PYODIDE_FILES = {
    "pyodide.mjs": "ESModule",
    "pyodide.asm.mjs": "ESModule",
    "pyodide.asm.wasm": "CompiledWasm",
    "python_stdlib.zip": "Data",
    "pyodide-lock.json": "Text",
}
PIP_PLATFORM = [
    "--only-binary=:all:",
    "--platform",
    "pyemscripten_2026_0_wasm32",
    "--python-version",
    "3.14",
    "--implementation",
    "cp",
    "--abi",
    "cp314",
]
ENTRYPOINT_CLASS = "Default"
STAMP = ".stamp"


def shown(path: Path) -> str:
    """A path as the logs show it: relative to the project when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def log(message: str) -> None:
    print(f"[bundle] {message}", file=sys.stderr, flush=True)


def source_files(folder: Path) -> list[Path]:
    """Files of a Python source tree, without caches."""
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in {".pyc", ".pyo"}
        and not any(part.endswith(".egg-info") for part in path.parts)
    )


def digest(paths: Iterable[Path], extra: str) -> str:
    hasher = hashlib.sha256(extra.encode())
    for path in paths:
        hasher.update(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path).encode())
        hasher.update(b"\0")
        hasher.update(path.read_bytes())
        hasher.update(b"\0")
    return hasher.hexdigest()


def read_wrangler() -> dict[str, object]:
    with (ROOT / "wrangler.toml").open("rb") as handle:
        return tomllib.load(handle)


def main_module_name(wrangler: dict[str, object]) -> str:
    main = str(wrangler.get("main", "src/entry.py"))
    path = Path(main)
    if path.suffix != ".py" or path.parent != Path("src"):
        raise SystemExit(f"wrangler.toml main must be a module directly in src/, not {main!r}")
    return path.stem


def durable_objects(wrangler: dict[str, object], extra: list[str]) -> dict[str, str]:
    section = wrangler.get("durable_objects", {})
    bindings = section.get("bindings", []) if isinstance(section, dict) else []
    result = {str(b["name"]): str(b["class_name"]) for b in bindings}
    for item in extra:
        binding, _, class_name = item.partition("=")
        if not binding or not class_name:
            raise SystemExit(f"--durable-object wants BINDING=Class, not {item!r}")
        result[binding] = class_name
    return result


def fetch_wheels(cache_root: Path) -> Path:
    """Download the pinned Pyodide-platform wheels once per version of requirements.txt."""
    key = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    folder = cache_root / key
    done = folder / ".complete"
    if done.exists():
        return folder
    cache_root.mkdir(parents=True, exist_ok=True)
    download = Path(tempfile.mkdtemp(prefix=".download.", dir=cache_root))
    log("downloading Pyodide wheels (pip) ...")
    started = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        *PIP_PLATFORM,
        "-d",
        str(download),
        "-r",
        str(REQUIREMENTS),
    ]
    subprocess.run(command, check=True)  # noqa: S603 - fixed argv, no shell
    (download / ".complete").touch()
    shutil.rmtree(folder, ignore_errors=True)
    download.rename(folder)
    log(f"wheels ready in {time.monotonic() - started:.1f} s")
    return folder


def write_site_packages(target: Path, wheel_dir: Path) -> None:
    seen: set[str] = set()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for stub in sorted((HERE / "py").glob("*.py")):
            out.write(stub, stub.name)
            seen.add(stub.name)
        for wheel in sorted(wheel_dir.glob("*.whl")):
            with zipfile.ZipFile(wheel) as source:
                for info in source.infolist():
                    # .pth hooks only load workerd-internal patches; the runtime has none.
                    if info.is_dir() or info.filename.endswith(".pth") or info.filename in seen:
                        continue
                    seen.add(info.filename)
                    out.writestr(info.filename, source.read(info))


def write_app(target: Path, roots: list[Path]) -> None:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for root in roots:
            for path in source_files(root):
                out.write(path, path.relative_to(root).as_posix())


def write_main(target: Path, objects: dict[str, str], main: str) -> None:
    lines = [
        "// Generated by scripts/workerd/build.py: do not edit.",
        'import { configure, makeDurableObject, makeEntrypoint } from "./boot.mjs";',
        "",
        f"configure({{ main: {json.dumps(main)} }});",
        f"export default makeEntrypoint({json.dumps(ENTRYPOINT_CLASS)});",
    ]
    for class_name in sorted(set(objects.values())):
        lines.append(f"export const {class_name} = makeDurableObject({json.dumps(class_name)});")
    target.write_text("\n".join(lines) + "\n")


def build(args: argparse.Namespace) -> Path:
    out: Path = args.out.resolve()
    overlays = [Path(p).resolve() for p in args.overlay]
    if not (PYODIDE_DIR / "package.json").exists():
        raise SystemExit("node_modules/pyodide is missing: run `npm ci` first")
    wrangler = read_wrangler()
    main = args.main or main_module_name(wrangler)
    objects = durable_objects(wrangler, args.durable_object)
    inputs = [
        REQUIREMENTS,
        Path(__file__).resolve(),
        HERE / "boot.mjs",
        *sorted((HERE / "py").glob("*.py")),
        PYODIDE_DIR / "package.json",
        ROOT / "wrangler.toml",
        *source_files(ROOT / "src"),
        *(path for overlay in overlays for path in source_files(overlay)),
    ]
    stamp = digest(inputs, json.dumps([main, objects, [str(p) for p in overlays]]))
    if not args.force and (out / STAMP).exists() and (out / STAMP).read_text() == stamp:
        log(f"up to date: {shown(out)}")
        return out

    started = time.monotonic()
    wheels = fetch_wheels(ROOT / ".threadline" / "wheels")
    log(f"building {shown(out)} ...")
    out.parent.mkdir(parents=True, exist_ok=True)
    # A private staging folder, swapped in at the end: concurrent builds never see half a bundle.
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    modules: list[dict[str, str]] = [
        {"type": "ESModule", "path": "main.mjs"},
        {"type": "ESModule", "path": "boot.mjs"},
    ]
    for name, kind in PYODIDE_FILES.items():
        shutil.copyfile(PYODIDE_DIR / name, staging / name)
        modules.append({"type": kind, "path": name})
    shutil.copyfile(HERE / "boot.mjs", staging / "boot.mjs")
    write_main(staging / "main.mjs", objects, main)
    write_site_packages(staging / "site-packages.zip", wheels)
    write_app(staging / "app.zip", [ROOT / "src", *overlays])
    modules += [
        {"type": "Data", "path": "site-packages.zip"},
        {"type": "Data", "path": "app.zip"},
    ]
    vars_section = wrangler.get("vars", {})
    manifest = {
        "name": wrangler.get("name", "threadline"),
        "main": main,
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


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".threadline" / "bundle")
    parser.add_argument("--overlay", action="append", default=[], help="extra source folder")
    parser.add_argument("--main", help="main module (default: from wrangler.toml)")
    parser.add_argument("--durable-object", action="append", default=[], metavar="BINDING=Class")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--wheels-only", action="store_true", help="only fetch the wheels")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if arguments.wheels_only:
        print(fetch_wheels(ROOT / ".threadline" / "wheels"))
    else:
        print(build(arguments))
