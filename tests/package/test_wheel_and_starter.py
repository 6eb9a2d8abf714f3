"""The package users install: built out of tree, checked, installed into a fresh virtual
environment, and used from there (the README's testing example, a starter project's tests),
never from this checkout.

Building runs ``python -m build`` on a copy of the files git knows (tracked, or new and not
ignored), so nothing is written into the checkout (no ``build/``, no ``egg-info``). Installing
reaches the package index for threadline's own dependencies, as a user's install does.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import venv
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

import pytest

import threadline

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: Seconds each packaging command may take (an index download included).
STEP_TIMEOUT_S = 600


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(arg) for arg in args], cwd=cwd, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _source_copy(target: Path) -> Path:
    listed = _run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                  cwd=ROOT)
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = _source_copy(tmp_path_factory.mktemp("tree"))
    out = tmp_path_factory.mktemp("dist")
    print("building the sdist and wheel (python -m build) ...", file=sys.stderr)
    _run(sys.executable, "-m", "build", "--outdir", out, tree)
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    wheels = sorted(dist.glob("threadline-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh virtual environment with the wheel and pytest installed: its python."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    print("installing the wheel into a fresh virtual environment (pip) ...", file=sys.stderr)
    _run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel,
         "pytest")
    return python


def test_the_build_leaves_the_checkout_as_it_was(dist: Path) -> None:
    assert not (ROOT / "build").exists()
    assert sorted(path.name.split("-")[0] for path in dist.iterdir()) == [
        "threadline", "threadline"]


def test_twine_finds_the_sdist_and_wheel_fit_to_publish(dist: Path) -> None:
    output = _run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()))
    assert output.count("PASSED") == 2, output


def test_the_wheel_is_pure_python_typed_and_carries_the_package_only(wheel: Path) -> None:
    assert re.fullmatch(r"threadline-[0-9][^-]*-py3-none-any\.whl", wheel.name)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(name for name in names if name.endswith(".dist-info/METADATA"))
        metadata = HeaderParser().parsestr(archive.read(metadata_name).decode())
    assert "threadline/py.typed" in names
    assert "threadline/worker.py" in names
    assert "threadline/starter/template/wrangler.toml" in names
    assert "threadline/starter/template/src/app.py.tmpl" in names
    # Only the package: no tests, no example Worker, no build leftovers.
    assert all(name.startswith(("threadline/", "threadline-")) for name in names), names
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["Requires-Python"] == ">=3.11"
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.14" in classifiers
    extras = metadata.get_all("Provides-Extra") or []
    assert "client" in extras
    requires = metadata.get_all("Requires-Dist") or []
    assert any(req.startswith("pydantic") for req in requires)


def test_the_installed_package_imports_without_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    probe = ("import threadline, sys; "
             "assert 'site-packages' in threadline.__file__, threadline.__file__; "
             "assert not any(name in sys.modules for name in ('js', 'pyodide', 'workers')); "
             "print(threadline.__version__)")
    version = _run(installed, "-c", probe, cwd=tmp_path).strip()
    assert version == threadline.__version__


def test_the_readme_testing_example_passes_against_the_installed_package(
    installed: Path, tmp_path: Path
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"),
                        flags=re.DOTALL)
    examples = [block for block in blocks if "threadline.testing" in block]
    assert examples
    for n, example in enumerate(examples):
        (tmp_path / f"test_readme_example_{n}.py").write_text(example, encoding="utf-8")
    output = _run(installed, "-m", "pytest", "-q", "-p", "no:cacheprovider", tmp_path,
                  cwd=tmp_path)
    assert f"{len(examples)} passed" in output, output


def test_a_new_starter_project_passes_its_own_tests_at_once(
    installed: Path, wheel: Path, tmp_path: Path
) -> None:
    project = tmp_path / "my-agents"
    bin_dir = installed.parent
    _run(bin_dir / "threadline", "new", project, "--wheel", wheel, cwd=tmp_path)
    pyproject = (project / "pyproject.toml").read_text(encoding="utf-8")
    assert 'name = "my-agents"' in pyproject
    assert f'threadline = {{ path = "wheels/{wheel.name}" }}' in pyproject
    assert (project / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    for name in ("wrangler.toml", "src/app.py", "src/entry.py", "tests/test_app.py",
                 ".dev.vars.example", ".gitignore", "README.md"):
        assert (project / name).is_file(), name
    output = _run(installed, "-m", "pytest", "-q", cwd=project)
    assert "1 passed" in output, output


def test_a_new_starter_answers_over_http_in_the_local_runtime(
    installed: Path, wheel: Path, tmp_path: Path
) -> None:
    project = tmp_path / "served"
    bin_dir = installed.parent
    _run(bin_dir / "threadline", "new", project, "--wheel", wheel, cwd=tmp_path)
    token = "starter-token-" + "0123456789" * 3
    (project / ".dev.vars").write_text(f"THREADLINE_API_TOKEN={token}\n", encoding="utf-8")
    print("serving the starter in the local runtime (npm install, bundle) ...", file=sys.stderr)
    server = subprocess.Popen(
        [str(bin_dir / "threadline"), "dev", "--port", "0", "--memory",
         "--exit-on-stdin-close"],
        cwd=project, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        url = _ready(server, deadline=time.monotonic() + STEP_TIMEOUT_S)
        base = f"{url}/v1/spaces/demo/threads/welcome"
        auth = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        admitted = _http("POST", f"{base}/submissions", auth,
                         {"agent": "hello", "input": {"name": "Ada"}})
        location = f"{base}/submissions/{admitted['id']}"
        deadline = time.monotonic() + 60
        while True:
            detail = _http("GET", location, auth)
            if detail["state"] == "settled" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert detail["outcome"] == "completed", detail
        assert detail["result"] == {"greeting": "Hello, Ada!"}
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def _ready(server: subprocess.Popen[str], deadline: float) -> str:
    assert server.stdout is not None
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if line.startswith("ready "):
            return line.split(" ", 1)[1].strip()
        if not line and server.poll() is not None:
            break
    server.kill()
    raise AssertionError(f"the local runtime did not start:\n{server.stderr.read()}")


def _http(method: str, url: str, headers: dict[str, str], body: object = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())
